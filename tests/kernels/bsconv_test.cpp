// bsconv, bsconv_dx, bsconv_dw, edge_bias, edge_bias_grad on the CPU: against a convolution with
// plain loops over the dense filter the layout stands for (masked where the layout has no block),
// f64 gradient checks of every op, the geometry and edge groups, and the errors.
#include <gtest/gtest.h>

#include "core/sparse/generators.h"
#include "gradcheck.h"
#include "kernels/common/conv_index.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
using testing::gradcheck;
using testing::test_randn;

// y [N, out…, K] of x [N, in…, C] and w [nnz, taps, bs, bs] with plain loops over every output
// coordinate, tap coordinate and (input channel, output channel) pair of the dense filter: the
// block's value where the layout stores one, else nothing. Its own index arithmetic (not ConvIndex).
std::vector<double> ref_conv(const std::vector<double>& x, const std::vector<double>& w, int64_t n,
                             const ConvGeometry& g, const std::vector<int64_t>& in, const BlockLayout& l) {
  const int64_t C = l.in_features(), K = l.out_features(), bs = l.block_size();
  std::vector<int64_t> out(3, 1), insz(3, 1), ker(3, 1), str(3, 1), dil(3, 1), pad(3, 0);
  for (int d = 0; d < g.dims; ++d) {
    insz[d] = in[d];
    out[d] = (in[d] + g.pad_lo[d] + g.pad_hi[d] - g.dilation[d] * (g.kernel[d] - 1) - 1) / g.stride[d] + 1;
    ker[d] = g.kernel[d], str[d] = g.stride[d], dil[d] = g.dilation[d], pad[d] = g.pad_lo[d];
  }
  const int64_t P = out[0] * out[1] * out[2], Pin = insz[0] * insz[1] * insz[2], taps = ker[0] * ker[1] * ker[2];
  std::vector<double> y(static_cast<size_t>(n * P * K), 0.0);
  for (int64_t s = 0; s < n; ++s)
    for (int64_t o0 = 0; o0 < out[0]; ++o0)
      for (int64_t o1 = 0; o1 < out[1]; ++o1)
        for (int64_t o2 = 0; o2 < out[2]; ++o2)
          for (int64_t t0 = 0; t0 < ker[0]; ++t0)
            for (int64_t t1 = 0; t1 < ker[1]; ++t1)
              for (int64_t t2 = 0; t2 < ker[2]; ++t2) {
                const int64_t i0 = o0 * str[0] - pad[0] + t0 * dil[0], i1 = o1 * str[1] - pad[1] + t1 * dil[1],
                              i2 = o2 * str[2] - pad[2] + t2 * dil[2];
                if (i0 < 0 || i0 >= insz[0] || i1 < 0 || i1 >= insz[1] || i2 < 0 || i2 >= insz[2]) continue;
                const int64_t o = (o0 * out[1] + o1) * out[2] + o2, i = (i0 * insz[1] + i1) * insz[2] + i2;
                const int64_t t = (t0 * ker[1] + t1) * ker[2] + t2;
                for (int64_t cin = 0; cin < C; ++cin)
                  for (int64_t kc = 0; kc < K; ++kc) {
                    const int64_t k = l.block_index(cin / bs, kc / bs);
                    if (k < 0) continue;
                    y[(s * P + o) * K + kc] +=
                        x[(s * Pin + i) * C + cin] * w[((k * taps + t) * bs + cin % bs) * bs + kc % bs];
                  }
              }
  return y;
}

struct Case {
  std::vector<int64_t> in;  // spatial sizes
  ConvGeometry g;
  std::string name;
};

// 1-D causal with dilation, 1-D same with stride 2 (odd length), 2-D same 3x3 with stride 2 on odd
// sizes, 2-D valid with dilation 2, 2-D explicit uneven pads, 3-D same.
std::vector<Case> cases() {
  return {{{9}, conv_geometry({9}, {3}, {1}, {2}, ConvPadding::causal), "1-D causal k3 d2"},
          {{7}, conv_geometry({7}, {4}, {2}, {1}, ConvPadding::same), "1-D same k4 s2"},
          {{5, 7}, conv_geometry({5, 7}, {3, 3}, {2}, {1}, ConvPadding::same), "2-D same 3x3 s2"},
          {{7, 6}, conv_geometry({7, 6}, {3, 2}, {1}, {2}, ConvPadding::valid), "2-D valid 3x2 d2"},
          {{4, 5}, conv_geometry({}, {2, 3}, {1, 2}, {1}, ConvPadding::explicit_pads, {1, 0}, {2, 1}), "2-D explicit"},
          {{3, 4, 3}, conv_geometry({3, 4, 3}, {3, 1, 2}, {1}, {1}, ConvPadding::same), "3-D same"}};
}

Shape act_shape(int64_t n, const std::vector<int64_t>& sp, int64_t ch) {
  std::vector<int64_t> s{n};
  s.insert(s.end(), sp.begin(), sp.end());
  s.push_back(ch);
  return Shape(s);
}

TEST(BsConv, GeometryOutputSizesAndPaddingModes) {
  ConvGeometry g = conv_geometry({10}, {3}, {1}, {4}, ConvPadding::causal);
  EXPECT_EQ(g.pad_lo[0], 8);
  EXPECT_EQ(g.pad_hi[0], 0);
  EXPECT_EQ(g.out_size(0, 10), 10);
  g = conv_geometry({7, 8}, {3, 3}, {2}, {1}, ConvPadding::same);  // out = ceil(in / 2)
  EXPECT_EQ(g.out_spatial({7, 8}, "t"), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(g.pad_lo[0] + g.pad_hi[0], 2);  // (4-1)·2 + 3 - 7
  EXPECT_EQ(g.pad_lo[1], 0);                // (4-1)·2 + 3 - 8 = 1: the smaller half first
  EXPECT_EQ(g.pad_hi[1], 1);
  g = conv_geometry({}, {3, 3}, {1}, {2}, ConvPadding::valid);
  EXPECT_EQ(g.out_spatial({9, 5}, "t"), (std::vector<int64_t>{5, 1}));
  EXPECT_EQ(g.taps(), 9);
  expect_error<ValueError>([] { conv_geometry({4, 4}, {3, 3}, {1}, {1}, ConvPadding::causal); }, {"causal", "1-D"});
  expect_error<ValueError>([] { conv_geometry({}, {3, 3, 3, 3}, {1}, {1}, ConvPadding::valid); }, {"4 spatial"});
  expect_error<ValueError>([] { conv_geometry({}, {3}, {0}, {1}, ConvPadding::valid); }, {"stride", "0"});
  expect_error<ValueError>([] { conv_geometry({}, {3, 3}, {1, 1, 1}, {1}, ConvPadding::valid); }, {"stride", "3 values"});
  expect_error<ValueError>([] { conv_geometry({}, {3}, {1}, {1}, ConvPadding::same); }, {"same", "spatial sizes"});
  expect_error<ShapeError>([] { conv_geometry({}, {5}, {1}, {1}, ConvPadding::valid).out_spatial({3}, "op"); },
                           {"op", "too small"});
  expect_error<ValueError>([] { parse_conv_padding("full"); }, {"full", "valid"});
}

TEST(BsConv, EdgeGroupsOfCausalAndSamePadding) {
  // 1-D causal, kernel 3, dilation 2: t 0-1 read two padded taps, t 2-3 one, the rest none
  EdgeGroups e = edge_groups(conv_geometry({8}, {3}, {1}, {2}, ConvPadding::causal), {8});
  EXPECT_EQ(e.count, 2);
  EXPECT_EQ(e.group, (std::vector<int32_t>{0, 0, 1, 1, -1, -1, -1, -1}));
  // 2-D same 3x3: the four sides and four corners
  e = edge_groups(conv_geometry({4, 5}, {3, 3}, {1}, {1}, ConvPadding::same), {4, 5});
  EXPECT_EQ(e.count, 8);
  EXPECT_EQ(e.group[0], 0);        // top-left corner
  EXPECT_EQ(e.group[1], 1);        // top side
  EXPECT_EQ(e.group[2], 1);
  EXPECT_EQ(e.group[6], -1);       // (1, 1): interior
  EXPECT_EQ(e.group[5], e.group[10]);  // left side, rows 1 and 2
  // valid padding: no edges
  EXPECT_EQ(edge_groups(conv_geometry({}, {3}, {1}, {1}, ConvPadding::valid), {6}).count, 0);
  const Tensor idx = edge_group_index(conv_geometry({8}, {3}, {1}, {2}, ConvPadding::causal), {8});
  EXPECT_EQ(idx.dtype(), DType::i32);
  EXPECT_EQ(idx.shape(), Shape({8}));
}

// Every op against the loops, for random layouts with an empty block row and column, every block size.
TEST(BsConv, AllOpsMatchTheDenseConvolutionOfTheMaskedFilter) {
  uint64_t seed = 10;
  for (int64_t bs : {8, 16, 32, 64})
    for (const Case& cs : cases()) {
      if (bs == 64 && cs.g.dims == 3) continue;  // time
      // 2x3 blocks: block row 1 and block column 2 empty
      LayoutPtr l = BlockLayout::from_mask(2 * bs, 3 * bs, bs, {1, 1, 0, 0, 0, 0});
      if (bs == 16) l = random_layout(3 * bs, 2 * bs, bs, 0.5, seed);
      SCOPED_TRACE(cs.name + " " + l->str());
      const int64_t n = 2, C = l->in_features(), K = l->out_features();
      const ConvIndex ci = conv_index(cs.g, cs.in, "test");
      const std::vector<int64_t> out(ci.out, ci.out + cs.g.dims);
      Shape wshape = detail::bsconv_weight_shape(*l, cs.g);
      const Tensor x = test_randn(act_shape(n, cs.in, C), ++seed), w = test_randn(wshape, ++seed);
      const Tensor dy = test_randn(act_shape(n, out, K), ++seed);
      const Tensor y = bsconv(x, w, l, cs.g);
      ASSERT_EQ(y.shape(), act_shape(n, out, K));
      EXPECT_TRUE(all_close(y, ref_conv(x.to_vector<double>(), w.to_vector<double>(), n, cs.g, cs.in, *l), 1e-10, 1e-10));
      // dx = Jᵀ·dy and dw: <y(x, w), dy> is bilinear, so <x, dx> = <y, dy> = <w, dw>
      const Tensor dx = bsconv_dx(dy, w, l, cs.g, cs.in), dw = bsconv_dw(x, dy, l, cs.g);
      ASSERT_EQ(dx.shape(), x.shape());
      ASSERT_EQ(dw.shape(), w.shape());
      const double ydy = sum(mul(y, dy)).item<double>();
      EXPECT_NEAR(sum(mul(x, dx)).item<double>(), ydy, 1e-9 * (1 + std::abs(ydy)));
      EXPECT_NEAR(sum(mul(w, dw)).item<double>(), ydy, 1e-9 * (1 + std::abs(ydy)));
      // f32 kernels within rounding of f64
      EXPECT_TRUE(all_close(cast(bsconv(cast(x, DType::f32), cast(w, DType::f32), l, cs.g), DType::f64),
                            y.to_vector<double>(), 1e-4, 1e-4));
    }
}

// The all-blocks layout is the dense convolution built from ops: for a 1-D causal convolution,
// y = Σ_t (x shifted right by (k − 1 − t)·d, zeros in front) · W_t, with W_t [C, K] dense; values
// and gradients (of x and of the filter, gathered back from W_t's blocks).
TEST(BsConv, AllBlocksLayoutIsTheDenseConvolutionBuiltFromOps) {
  const int64_t n = 2, T = 9, C = 16, K = 24, k = 3, d = 2, bs = 8;
  LayoutPtr l = dense_layout(C, K, bs);
  const ConvGeometry g = conv_geometry({T}, {k}, {1}, {d}, ConvPadding::causal);
  const Tensor x = test_randn({n, T, C}, 1).requires_grad_(), w = test_randn({l->nnz(), k, bs, bs}, 2).requires_grad_();
  const Tensor r = test_randn({n, T, K}, 3);
  // W_t dense [C, K] from the blocks of tap t (copied out: the reference's filter is its own leaf)
  std::vector<Tensor> wd;
  const std::vector<double> wv = w.detach().to_vector<double>();
  for (int64_t t = 0; t < k; ++t) {
    std::vector<double> dense(C * K, 0.0);
    for (int64_t b = 0; b < l->nnz(); ++b)
      for (int64_t i = 0; i < bs; ++i)
        for (int64_t j = 0; j < bs; ++j)
          dense[(l->block_row()[b] * bs + i) * K + l->block_col()[b] * bs + j] = wv[((b * k + t) * bs + i) * bs + j];
    wd.push_back(from_vector(dense, Shape({C, K}), DType::f64).requires_grad_());
  }
  Tensor want;
  const Tensor xr = x.detach().requires_grad_();
  for (int64_t t = 0; t < k; ++t) {
    const int64_t s = (k - 1 - t) * d;  // tap t of output position o reads input o − s
    const Tensor shifted = s == 0 ? xr : concat({zeros({n, s, C}, DType::f64), slice(xr, 1, 0, T - s)}, 1);
    const Tensor term = matmul(reshape(shifted, {n * T, C}), wd[t]);
    want = want.defined() ? add(want, term) : term;
  }
  const Tensor y = bsconv(x, w, l, g);
  EXPECT_TRUE(all_close(reshape(y, {n * T, K}), want, 1e-12, 1e-12));
  sum(mul(y, r)).backward();
  sum(mul(want, reshape(r, {n * T, K}))).backward();
  EXPECT_TRUE(all_close(x.grad(), xr.grad(), 1e-12, 1e-12));
  const std::vector<double> gw = w.grad().to_vector<double>();
  for (int64_t t = 0; t < k; ++t) {
    const std::vector<double> gd = wd[t].grad().to_vector<double>();
    for (int64_t b = 0; b < l->nnz(); ++b)
      for (int64_t i = 0; i < bs; ++i)
        for (int64_t j = 0; j < bs; ++j)
          EXPECT_NEAR(gw[((b * k + t) * bs + i) * bs + j],
                      gd[(l->block_row()[b] * bs + i) * K + l->block_col()[b] * bs + j], 1e-12);
  }
}

// A 1x1 filter is bsmm.
TEST(BsConv, OneByOneFilterIsBsmm) {
  LayoutPtr l = random_layout(64, 96, 16, 0.5, 3);
  const ConvGeometry g = conv_geometry({}, {1, 1}, {1}, {1}, ConvPadding::valid);
  const Tensor x = test_randn({2, 3, 5, 64}, 1), w = test_randn({l->nnz(), 1, 1, 16, 16}, 2);
  const Tensor y = bsconv(x, w, l, g);
  const Tensor want = bsmm(reshape(x, {30, 64}), reshape(w, {l->nnz(), 16, 16}), l);
  EXPECT_TRUE(all_close(reshape(y, {30, 96}), want, 1e-12, 1e-12));
}

TEST(BsConv, GradientsOfEveryOp) {
  for (int64_t bs : {8, 16})
    for (const Case& cs : cases()) {
      LayoutPtr l = BlockLayout::from_mask(2 * bs, 2 * bs, bs, {1, 0, 1, 1});
      SCOPED_TRACE(cs.name + " bs " + std::to_string(bs));
      const ConvIndex ci = conv_index(cs.g, cs.in, "test");
      const std::vector<int64_t> out(ci.out, ci.out + cs.g.dims);
      const int64_t n = 1, C = l->in_features(), K = l->out_features();
      const Tensor x = test_randn(act_shape(n, cs.in, C), 1), w = test_randn(detail::bsconv_weight_shape(*l, cs.g), 2);
      const Tensor dy = test_randn(act_shape(n, out, K), 3);
      const ConvGeometry g = cs.g;
      const std::vector<int64_t> in = cs.in;
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& a) { return bsconv(a[0], a[1], l, g); }, {x, w}));
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& a) { return bsconv_dx(a[0], a[1], l, g, in); }, {dy, w}));
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& a) { return bsconv_dw(a[0], a[1], l, g); }, {x, dy}));
    }
}

TEST(BsConv, TransposedConvolutionMapsBackToTheInputSizes) {
  // stride 2: inputs of 8 and of 7 both give 4 outputs; bsconv_dx takes the sizes to make
  LayoutPtr l = random_layout(16, 32, 8, 0.5, 4);
  const ConvGeometry g = conv_geometry({}, {3}, {2}, {1}, ConvPadding::explicit_pads, {1}, {1});
  const Tensor dy = test_randn({2, 4, 32}, 1), w = test_randn({l->nnz(), 3, 8, 8}, 2);
  EXPECT_EQ(bsconv_dx(dy, w, l, g, {8}).shape(), Shape({2, 8, 16}));
  EXPECT_EQ(bsconv_dx(dy, w, l, g, {7}).shape(), Shape({2, 7, 16}));
  expect_error<ShapeError>([&] { bsconv_dx(dy, w, l, g, {12}); }, {"bsconv_dx", "[2, 4, 32]", "[6]"});
}

TEST(BsConv, DeterministicAcrossCalls) {
  LayoutPtr l = random_layout(64, 64, 16, 0.5, 5);
  const ConvGeometry g = conv_geometry({40}, {5}, {1}, {3}, ConvPadding::causal);
  const Tensor x = test_randn({3, 40, 64}, 1, DType::f32), w = test_randn({l->nnz(), 5, 16, 16}, 2, DType::f32);
  const Tensor dy = test_randn({3, 40, 64}, 3, DType::f32);
  EXPECT_EQ(bsconv(x, w, l, g).to_vector<float>(), bsconv(x, w, l, g).to_vector<float>());
  EXPECT_EQ(bsconv_dw(x, dy, l, g).to_vector<float>(), bsconv_dw(x, dy, l, g).to_vector<float>());
  EXPECT_EQ(bsconv_dx(dy, w, l, g, {40}).to_vector<float>(), bsconv_dx(dy, w, l, g, {40}).to_vector<float>());
}

TEST(BsConv, ErrorsNameOpAndShapes) {
  LayoutPtr l = random_layout(16, 24, 8, 1.0, 6);  // nnz 6
  const ConvGeometry g1 = conv_geometry({10}, {3}, {1}, {1}, ConvPadding::causal);
  const ConvGeometry g2 = conv_geometry({}, {3, 3}, {1}, {1}, ConvPadding::valid);
  const Tensor x = zeros({2, 10, 16}), w = zeros({6, 3, 8, 8});
  expect_error<ShapeError>([&] { bsconv(zeros({2, 10, 17}), w, l, g1); }, {"bsconv", "16 channels"});
  expect_error<ShapeError>([&] { bsconv(zeros({20, 16}), w, l, g1); }, {"bsconv", "[20, 16]", "[N, T, channels]"});
  expect_error<ShapeError>([&] { bsconv(x, zeros({6, 2, 8, 8}), l, g1); }, {"bsconv", "[6, 2, 8, 8]", "[6, 3, 8, 8]"});
  expect_error<ShapeError>([&] { bsconv(x, w, l, g2); }, {"bsconv", "2-D"});
  expect_error<ShapeError>([&] { bsconv(zeros({2, 1, 2, 16}), zeros({6, 3, 3, 8, 8}), l, g2); }, {"bsconv", "too small"});
  expect_error<DTypeError>([&] { bsconv(x, zeros({6, 3, 8, 8}, DType::f64), l, g1); }, {"bsconv"});
  expect_error<ValueError>([&] { bsconv(x, w, nullptr, g1); }, {"bsconv", "layout"});
  expect_error<ValueError>([&] { bsconv(x, w, l, ConvGeometry{}); }, {"bsconv", "0 spatial"});
  expect_error<ShapeError>([&] { bsconv_dw(x, zeros({2, 9, 24}), l, g1); }, {"bsconv_dw", "[2, 9, 24]"});
  expect_error<ValueError>([&] { bsconv_dx(zeros({2, 10, 24}), w, l, g1, {10, 3}); }, {"bsconv_dx", "2 input sizes"});
}

TEST(EdgeBias, MatchesTheDefinitionAndItsGradients) {
  const ConvGeometry g = conv_geometry({6}, {3}, {1}, {2}, ConvPadding::causal);
  const Tensor groups = edge_group_index(g, {6});  // {0, 0, 1, 1, -1, -1}
  const Tensor x = test_randn({2, 6, 5}, 1), gain = test_randn({2, 5}, 2), bias = test_randn({2, 5}, 3);
  const std::vector<double> xv = x.to_vector<double>(), gv = gain.to_vector<double>(), bv = bias.to_vector<double>();
  const std::vector<int32_t> gr = groups.to_vector<int32_t>();
  std::vector<double> want(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    const int64_t k = static_cast<int64_t>(i % 5), e = gr[(i / 5) % 6];
    want[i] = e < 0 ? xv[i] : xv[i] * gv[e * 5 + k] + bv[e * 5 + k];
  }
  EXPECT_TRUE(all_close(edge_bias(x, groups, gain, bias), want, 1e-14, 1e-14));
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& a) { return edge_bias(a[0], groups, a[1], a[2]); },
                        {x, gain, bias}));
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& a) { return edge_bias(a[0], groups, a[1]); }, {x, gain}));
  // 2-D groups, through a convolution
  LayoutPtr l = random_layout(16, 16, 8, 1.0, 2);
  const ConvGeometry g2 = conv_geometry({4, 3}, {3, 3}, {1}, {1}, ConvPadding::same);
  const Tensor groups2 = edge_group_index(g2, {4, 3});
  const int64_t E = edge_groups(g2, {4, 3}).count;
  const Tensor x2 = test_randn({2, 4, 3, 16}, 4), w2 = test_randn({l->nnz(), 3, 3, 8, 8}, 5);
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<Tensor>& a) { return edge_bias(bsconv(a[0], a[1], l, g2), groups2, a[2], a[3]); },
      {x2, w2, test_randn({E, 16}, 6), test_randn({E, 16}, 7)}));
}

TEST(EdgeBias, Errors) {
  const Tensor groups = from_vector<int32_t>({0, -1, 1}, Shape({3}));
  const Tensor x = zeros({2, 3, 4}), p = zeros({2, 4});
  expect_error<ShapeError>([&] { edge_bias(zeros({2, 4, 4}), groups, p, p); }, {"edge_bias", "groups", "[4]"});
  expect_error<ShapeError>([&] { edge_bias(x, groups, zeros({2, 5}), p); }, {"edge_bias", "gain", "[2, 5]"});
  expect_error<ShapeError>([&] { edge_bias(x, groups, p, zeros({3, 4})); }, {"edge_bias", "bias"});
  expect_error<ShapeError>([&] { edge_bias(x, cast(groups, DType::f32), p, p); }, {"edge_bias", "i32"});
  expect_error<ValueError>([&] { edge_bias(x, from_vector<int32_t>({0, 2, 1}, Shape({3})), p, p); },
                           {"edge_bias", "group 2", "position 1"});
  expect_error<ShapeError>([&] { edge_bias_grad(x, zeros({2, 3, 5}), groups, 2); }, {"edge_bias_grad", "dy"});
}

}  // namespace
}  // namespace tessera
