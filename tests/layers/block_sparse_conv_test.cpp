// nn::BlockSparseConv and nn::EdgeBias: the forward is the op plus the bias, weight norm gives each
// output channel the norm of its gain, gradients reach every parameter (f64), compiled steps give
// the eager numbers, and bad options give one clear error.
#include <gtest/gtest.h>

#include <cmath>

#include "core/graph/compile.h"
#include "core/sparse/generators.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "layers/block_sparse_conv.h"

namespace tessera {
namespace {

using nn::BlockSparseConv;
using nn::BlockSparseConvOptions;
using testing::all_close;
using testing::expect_error;
using testing::parameters_gradcheck;
using testing::set_values;
using testing::test_rand;
using testing::test_randn;

// 3x3 blocks of 8 with block column 1 empty.
LayoutPtr holey_layout() { return BlockLayout::from_mask(24, 24, 8, {1, 0, 1, 0, 0, 1, 1, 0, 0}); }

TEST(BlockSparseConv, ForwardIsTheOpPlusBias) {
  Generator gen(1);
  BlockSparseConv conv(BlockSparseConvOptions(24, 24, {3}, 8).layout(holey_layout()).dilation({2})
                           .padding(ConvPadding::causal).dtype(DType::f64), gen);
  set_values(conv.bias(), test_randn({24}, 2));
  const Tensor x = test_randn({2, 11, 24}, 3);
  const ConvGeometry g = conv.geometry({11});
  EXPECT_EQ(g.pad_lo[0], 4);
  EXPECT_EQ(conv.weight().shape(), Shape({holey_layout()->nnz(), 3, 8, 8}));
  EXPECT_TRUE(all_close(conv.forward(x), add(bsconv(x, conv.weight(), conv.layout(), g), conv.bias()), 1e-14, 1e-14));
  EXPECT_EQ(conv.num_parameters(), holey_layout()->nnz() * 3 * 64 + 24);
  // 2-D, same padding, stride 2: odd sizes halve, rounding up
  BlockSparseConv conv2(BlockSparseConvOptions(16, 32, {3, 3}, 8).stride({2}).padding(ConvPadding::same)
                            .density(0.5, 4).dtype(DType::f64), gen);
  EXPECT_EQ(conv2.forward(test_randn({1, 7, 9, 16}, 4)).shape(), Shape({1, 4, 5, 32}));
}

TEST(BlockSparseConv, WeightNormGivesChannelNormsEqualToGain) {
  Generator gen(6);
  BlockSparseConv conv(BlockSparseConvOptions(24, 24, {2, 2}, 8).layout(holey_layout()).weight_norm(true)
                           .dtype(DType::f64), gen);
  EXPECT_TRUE(all_close(conv.effective_weight(), conv.weight(), 1e-12, 1e-12));  // W = V at first
  const Tensor gain = test_rand({24}, 0.5, 2.0, 7);
  set_values(conv.gain(), gain);
  const std::vector<double> w = conv.effective_weight().to_vector<double>(), g = gain.to_vector<double>();
  const BlockLayout& l = *conv.layout();
  std::vector<double> norm2(24, 0.0);
  for (int64_t k = 0; k < l.nnz(); ++k)
    for (int64_t t = 0; t < 4; ++t)
      for (int64_t i = 0; i < 8; ++i)
        for (int64_t j = 0; j < 8; ++j) {
          const double v = w[((k * 4 + t) * 8 + i) * 8 + j];
          norm2[l.block_col()[k] * 8 + j] += v * v;
        }
  for (int j = 0; j < 24; ++j) {
    if (j / 8 == 1) {
      EXPECT_EQ(norm2[j], 0.0) << "channel " << j << " has no stored block";
    } else {
      EXPECT_NEAR(std::sqrt(norm2[j]), g[j], 1e-12) << "channel " << j;
    }
  }
}

TEST(BlockSparseConv, GradientsReachEveryParameter) {
  Generator gen(8);
  auto conv = std::make_shared<BlockSparseConv>(BlockSparseConvOptions(24, 24, {3}, 8).layout(holey_layout())
                                                    .padding(ConvPadding::causal).weight_norm(true)
                                                    .dtype(DType::f64), gen);
  set_values(conv->bias(), test_randn({24}, 9));
  const Tensor x = test_randn({2, 5, 24}, 10);
  nn::EdgeBias edge(conv->geometry({5}), {5}, 24, DType::f64);
  EXPECT_EQ(edge.groups(), 2);
  set_values(edge.gain(), test_randn({2, 24}, 11));
  set_values(edge.bias(), test_randn({2, 24}, 12));
  auto params = conv->named_parameters();
  for (auto& p : edge.named_parameters()) params.push_back({"edge." + p.name, p.tensor});
  EXPECT_TRUE(parameters_gradcheck(params, [&] { return edge.forward(conv->forward(x), {5}); }));
}

TEST(BlockSparseConv, CompiledStepMatchesEager) {
  Generator gen(9);
  BlockSparseConv conv(BlockSparseConvOptions(24, 24, {3, 2}, 8).layout(holey_layout()).padding(ConvPadding::same)
                           .weight_norm(true).dtype(DType::f64), gen);
  nn::EdgeBias edge(conv.geometry({4, 5}), {4, 5}, 24, DType::f64);
  set_values(edge.gain(), test_randn({edge.groups(), 24}, 5));
  const Tensor x = test_randn({3, 4, 5, 24}, 10), r = test_randn({3, 4, 5, 24}, 11);
  auto params = conv.named_parameters();
  for (auto& p : edge.named_parameters()) params.push_back({"edge." + p.name, p.tensor});
  auto loss_fn = [&](const std::map<std::string, Tensor>& in) {
    return sum(mul(edge.forward(conv.forward(in.at("x")), {4, 5}), r));
  };
  conv.zero_grad();
  edge.zero_grad();
  Tensor eager = loss_fn({{"x", x}});
  eager.backward();
  CompiledStep step(loss_fn, params, nullptr, {{"x", x}});
  EXPECT_NEAR(step.run({{"x", x}}), eager.item<double>(), 1e-12);
  for (const auto& p : params)
    EXPECT_TRUE(all_close(step.fetch("grad/" + p.name), p.tensor.grad(), 1e-12, 1e-12)) << p.name;
}

// The transposed layer is the adjoint of the convolution with the same layout and filter:
// <F(a), b> = <a, T(b)>; its output sizes; forward = bsconv_dx + bias; weight norm per layout row.
TEST(BlockSparseConv, TransposedIsTheAdjointOfTheConvolution) {
  Generator gen(3);
  // 2-D, stride 2, kernel 3x2, valid, output padding 1 in the first dimension
  auto opts = [](bool transposed) {
    return BlockSparseConvOptions(24, 24, {3, 2}, 8).layout(holey_layout()).stride({2}).bias(false).dtype(DType::f64).transposed(transposed);
  };
  BlockSparseConv F(opts(false), gen);
  BlockSparseConv T(BlockSparseConvOptions(opts(true)).output_padding({1, 0}), gen);
  set_values(T.weight(), F.weight());
  EXPECT_EQ(T.output_spatial({4, 3}), (std::vector<int64_t>{10, 6}));  // (4-1)·2 + 3 + 1, (3-1)·2 + 2
  const Tensor a = test_randn({2, 10, 6, 24}, 1), b = test_randn({2, 4, 3, 24}, 2);
  const Tensor fa = F.forward(a), tb = T.forward(b);
  ASSERT_EQ(fa.shape(), b.shape());
  ASSERT_EQ(tb.shape(), a.shape());
  const double lhs = sum(mul(fa, b)).item<double>(), rhs = sum(mul(a, tb)).item<double>();
  EXPECT_NEAR(lhs, rhs, 1e-10 * (1 + std::abs(lhs)));
  EXPECT_TRUE(all_close(tb, bsconv_dx(b, T.weight(), T.layout(), T.geometry({4, 3}), {10, 6}), 1e-14, 1e-14));
  // same padding: in·stride
  BlockSparseConv S(BlockSparseConvOptions(24, 16, {3}, 8).stride({2}).padding(ConvPadding::same).transposed(true)
                        .dtype(DType::f64), gen);
  EXPECT_EQ(S.layout()->in_features(), 16);  // the layout is [out, in]
  EXPECT_EQ(S.forward(test_randn({1, 5, 24}, 3)).shape(), Shape({1, 10, 16}));
}

TEST(BlockSparseConv, TransposedWeightNormAndGradients) {
  Generator gen(4);
  BlockSparseConv T(BlockSparseConvOptions(24, 24, {3}, 8).layout(holey_layout()).transposed(true).weight_norm(true)
                        .stride({2}).dtype(DType::f64), gen);
  EXPECT_TRUE(all_close(T.effective_weight(), T.weight(), 1e-12, 1e-12));  // W = V at first
  const Tensor gain = test_rand({24}, 0.5, 2.0, 5);
  set_values(T.gain(), gain);
  const std::vector<double> w = T.effective_weight().to_vector<double>(), g = gain.to_vector<double>();
  const BlockLayout& l = *T.layout();
  std::vector<double> norm2(24, 0.0);  // per output channel = per layout row
  for (int64_t k = 0; k < l.nnz(); ++k)
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t i = 0; i < 8; ++i)
        for (int64_t j = 0; j < 8; ++j) norm2[l.block_row()[k] * 8 + i] += std::pow(w[((k * 3 + t) * 8 + i) * 8 + j], 2);
  for (int i = 0; i < 24; ++i) EXPECT_NEAR(std::sqrt(norm2[i]), g[i], 1e-12) << "channel " << i;
  set_values(T.bias(), test_randn({24}, 6));
  const Tensor x = test_randn({2, 3, 24}, 7);
  EXPECT_TRUE(parameters_gradcheck(T.named_parameters(), [&] { return T.forward(x); }));
}

TEST(BlockSparseConv, Errors) {
  Generator gen(1);
  expect_error<ShapeError>([&] { BlockSparseConv(BlockSparseConvOptions(24, 32, {3}, 8).layout(holey_layout()), gen); },
                           {"BlockSparseConv", "layout", "out 32"});
  expect_error<ValueError>([&] { BlockSparseConv(BlockSparseConvOptions(24, 24, {3}, 8).density(1.5), gen); },
                           {"BlockSparseConv", "density 1.5"});
  expect_error<ValueError>([&] { BlockSparseConv(BlockSparseConvOptions(24, 24, {3}, 8).stride({0}), gen); },
                           {"stride", "0"});
  expect_error<ValueError>(
      [&] { BlockSparseConv(BlockSparseConvOptions(24, 24, {3, 3}, 8).padding(ConvPadding::causal), gen); },
      {"causal", "1-D"});
  expect_error<ValueError>(
      [&] { BlockSparseConv(BlockSparseConvOptions(24, 24, {3}, 8).padding(ConvPadding::causal).transposed(true), gen); },
      {"transposed", "not causal"});
  expect_error<ValueError>(
      [&] { BlockSparseConv(BlockSparseConvOptions(24, 24, {3}, 8).stride({2}).transposed(true).output_padding({2}), gen); },
      {"output_padding 2", "stride 2"});
  expect_error<ValueError>([&] { BlockSparseConv(BlockSparseConvOptions(24, 24, {3}, 8).output_padding({0}), gen); },
                           {"output_padding", "transposed(true)"});
  BlockSparseConv conv(BlockSparseConvOptions(24, 24, {3}, 8), gen);
  expect_error<ShapeError>([&] { conv.forward(zeros({2, 5, 16})); }, {"BlockSparseConv", "[2, 5, 16]", "24"});
  expect_error<ShapeError>([&] { conv.forward(zeros({2, 24})); }, {"BlockSparseConv", "[N, T, 24]"});
  expect_error<ShapeError>([&] { conv.forward(zeros({2, 2, 24})); }, {"too small"});
  expect_error<ValueError>([&] { nn::EdgeBias(conv.geometry({5}), {5}, 24); }, {"EdgeBias", "no padding"});
  const ConvGeometry causal = conv_geometry({6}, {3}, {1}, {1}, ConvPadding::causal);
  nn::EdgeBias edge(causal, {6}, 24);
  expect_error<ShapeError>([&] { edge.forward(zeros({2, 6, 16}), {6}); }, {"EdgeBias", "[2, 6, 16]"});
  expect_error<ShapeError>([&] { edge.forward(zeros({2, 1, 24}), {1}); }, {"EdgeBias", "1 edge groups", "2"});
}

}  // namespace
}  // namespace tessera
