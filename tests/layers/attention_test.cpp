// nn::MultiHeadAttention: values against attention written with basic ops (matmul, causal mask,
// softmax), causality, sparse layouts ignoring the blocks they leave out, f64 gradient checks of
// the input and every parameter (dense and sparse layouts, dense and block-sparse projections).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"
#include "layers/layers.h"

namespace tessera {
namespace {

using Kind = nn::AttentionLayoutKind;
using Impl = nn::AttentionImpl;

using testing::all_close;
using testing::expect_error;
using testing::gradcheck;
using testing::parameters_gradcheck;
using testing::test_randn;

// Dense causal attention from basic ops, per batch b and head h, with the layer's projections:
//   qkv = x·Wqkv + b;  q, k, v = column blocks s*C + h*D of qkv (rows b*T ..)
//   o_bh = softmax(q·kᵀ/√D + mask)·v,   mask = -1e9 where key > query
//   y = concat_h,b(o_bh)·Wproj + bproj
Tensor reference_attention(const nn::MultiHeadAttention& attn, const Tensor& x, int64_t B) {
  const int64_t T = attn.options().seq_len(), C = attn.options().width(), H = attn.options().heads(),
                D = C / H;
  Tensor qkv = add(matmul(x, attn.qkv().dense()->weight()), attn.qkv().dense()->bias());  // [B*T, 3C]
  std::vector<double> m(static_cast<size_t>(T * T), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = t + 1; s < T; ++s) m[t * T + s] = -1e9;
  Tensor mask = from_vector(m, {T, T}, DType::f64);
  std::vector<Tensor> rows;
  for (int64_t b = 0; b < B; ++b) {
    Tensor xb = slice(qkv, 0, b * T, (b + 1) * T);  // [T, 3C]
    std::vector<Tensor> heads;
    for (int64_t h = 0; h < H; ++h) {
      Tensor q = slice(xb, 1, h * D, (h + 1) * D), k = slice(xb, 1, C + h * D, C + (h + 1) * D),
             v = slice(xb, 1, 2 * C + h * D, 2 * C + (h + 1) * D);
      Tensor p = softmax(add(mul(matmul(q, k, false, true), 1.0 / std::sqrt(double(D))), mask));  // [T, T]
      heads.push_back(matmul(p, v));                                                              // [T, D]
    }
    rows.push_back(concat(heads, 1));  // [T, C]
  }
  return add(matmul(concat(rows, 0), attn.proj().dense()->weight()), attn.proj().dense()->bias());
}

nn::AttentionOptions tiny(int64_t C, int64_t H, int64_t T) {
  return nn::AttentionOptions(C, H, T).block_size(8).dtype(DType::f64);
}

TEST(MultiHeadAttention, DenseLayoutMatchesBasicOps) {
  Generator gen(1);
  for (int64_t B : {1, 3}) {
    nn::MultiHeadAttention attn(tiny(12, 3, 24), gen);  // D = 4, 3 attention blocks
    Tensor x = test_randn({B * 24, 12}, 2);
    Tensor y = attn.forward(x, B);
    EXPECT_EQ(y.shape(), Shape({B * 24, 12}));
    EXPECT_TRUE(all_close(y, reference_attention(attn, x, B), 1e-10, 1e-12)) << "B " << B;
  }
}

TEST(MultiHeadAttention, ParametersAndLayouts) {
  Generator gen(2);
  nn::MultiHeadAttention dense(nn::AttentionOptions(32, 4, 64).block_size(16), gen);
  std::vector<std::string> names;
  for (const auto& p : dense.named_parameters()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"}));
  EXPECT_EQ(dense.num_parameters(), 32 * 96 + 96 + 32 * 32 + 32);
  EXPECT_EQ(*dense.layout(), *AttentionLayout::dense_causal(64, 16, 4));
  const int64_t T = 64, bs = 8, H = 2;
  auto opts = [&] { return nn::AttentionOptions(16, H, T).block_size(bs); };
  EXPECT_EQ(*nn::MultiHeadAttention(opts().layout(Kind::local).window(2), gen).layout(),
            *AttentionLayout::local_window(T, bs, H, 2));
  EXPECT_EQ(*nn::MultiHeadAttention(opts().layout(Kind::fixed).stride(4).summary(2), gen).layout(),
            *AttentionLayout::fixed(T, bs, H, 4, 2));
  EXPECT_EQ(*nn::MultiHeadAttention(opts().layout(Kind::strided).stride(3), gen).layout(),
            *AttentionLayout::strided(T, bs, H, 3));
  AttentionLayoutPtr given = AttentionLayout::local_window(T, bs, H, 3);
  EXPECT_TRUE(nn::MultiHeadAttention(opts().layout(given), gen).layout() == given);
  // Block-sparse projections count stored blocks only: qkv 2x6 blocks of 8x8 at density 0.5 -> 6.
  nn::MultiHeadAttention sp(opts().linear_block_size(8).density(0.5, 3), gen);
  ASSERT_TRUE(sp.qkv().sparse() && sp.proj().sparse());
  EXPECT_EQ(sp.qkv().sparse()->layout()->nnz(), 6);
  EXPECT_EQ(sp.num_parameters(), 6 * 64 + 48 + sp.proj().sparse()->layout()->nnz() * 64 + 16);
}

TEST(MultiHeadAttention, Errors) {
  Generator gen(3);
  expect_error<ValueError>(
      [&] { nn::MultiHeadAttention(nn::AttentionOptions(30, 4, 32).block_size(8), gen); },
      {"MultiHeadAttention", "width 30", "heads 4"});
  expect_error<ValueError>([&] { nn::attention_layout_kind_from_string("banded"); },
                           {"attention layout", "banded", "dense, local, fixed, strided"});
  expect_error<ValueError>(
      [&] {
        nn::MultiHeadAttention(
            nn::AttentionOptions(16, 2, 32).block_size(8).layout(AttentionLayout::dense_causal(32, 8, 4)),
            gen);
      },
      {"MultiHeadAttention", "heads 2"});
  expect_error<ShapeError>(
      [&] { nn::MultiHeadAttention(nn::AttentionOptions(16, 2, 20).block_size(8), gen); }, {"T=20", "bs=8"});
  nn::MultiHeadAttention attn(nn::AttentionOptions(16, 2, 16).block_size(8), gen);
  expect_error<ShapeError>(
      [&] {
        attn.forward(zeros({40, 16}), 2);
      },
      {"MultiHeadAttention", "[40, 16]", "2*16"});
}

// Output rows of positions < t0 must not change when the tokens at positions >= t0 change.
void expect_causal(const nn::MultiHeadAttention& attn, int64_t B, int64_t t0) {
  const int64_t T = attn.options().seq_len(), C = attn.options().width();
  Tensor x = test_randn({B * T, C}, 5);
  std::vector<double> xv = x.to_vector<double>(), noise = test_randn({B * T, C}, 6).to_vector<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = t0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) xv[(b * T + t) * C + c] += noise[(b * T + t) * C + c];
  std::vector<double> y1 = attn.forward(x, B).to_vector<double>();
  std::vector<double> y2 = attn.forward(from_vector(xv, {B * T, C}, DType::f64), B).to_vector<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      double diff = 0;
      for (int64_t c = 0; c < C; ++c)
        diff = std::max(diff, std::abs(y1[(b * T + t) * C + c] - y2[(b * T + t) * C + c]));
      if (t < t0) {
        EXPECT_EQ(diff, 0.0) << "b " << b << " t " << t << " changed with later tokens";
      } else {
        EXPECT_GT(diff, 1e-6) << "b " << b << " t " << t;
      }
    }
}

TEST(MultiHeadAttention, LayoutKindAndImplNamesRoundTrip) {
  // The names configs and command lines use, parsed into the enums at the edge.
  for (const char* name : {"dense", "local", "fixed", "strided"})
    EXPECT_STREQ(nn::attention_layout_kind_name(nn::attention_layout_kind_from_string(name)), name);
  for (const char* name : {"auto", "block", "dense"})
    EXPECT_STREQ(nn::attention_impl_name(nn::attention_impl_from_string(name)), name);
  EXPECT_EQ(nn::attention_layout_kind_from_string("local"), Kind::local);
  EXPECT_EQ(nn::attention_impl_from_string("auto"), Impl::automatic);
  expect_error<ValueError>([] { nn::attention_impl_from_string("Dense"); }, {"attention impl", "\"Dense\""});
}

TEST(MultiHeadAttention, Causal) {
  Generator gen(4);
  for (const char* kind : {"dense", "local", "fixed", "strided"}) {
    SCOPED_TRACE(kind);
    nn::MultiHeadAttention attn(
        tiny(8, 2, 32).layout(nn::attention_layout_kind_from_string(kind)).window(2).stride(2).summary(1), gen);
    expect_causal(attn, 2, 13);  // inside block 1 of 4
    expect_causal(attn, 1, 24);  // at a block boundary
  }
}

TEST(MultiHeadAttention, SparseLayoutIgnoresLeftOutBlocks) {
  // local window 1: each query block sees only itself, so block 1's outputs ignore block 0's tokens
  // (with a dense layout they do not).
  Generator gen(5);
  nn::MultiHeadAttention local(tiny(8, 2, 16).layout(Kind::local).window(1), gen);
  Tensor x = test_randn({16, 8}, 7);
  std::vector<double> xv = x.to_vector<double>();
  for (int64_t i = 0; i < 8 * 8; ++i) xv[i] += 1.0;  // tokens 0..7 (block 0)
  Tensor x2 = from_vector(xv, {16, 8}, DType::f64);
  EXPECT_TRUE(all_close(slice(local.forward(x2, 1), 0, 8), slice(local.forward(x, 1), 0, 8), 0, 0));
  EXPECT_FALSE(
      all_close(slice(local.forward(x2, 1), 0, 0, 8), slice(local.forward(x, 1), 0, 0, 8), 1e-6, 1e-6));
}

TEST(MultiHeadAttention, GradientsDenseAndSparse) {
  Generator gen(6);
  struct Case {
    const char* kind;
    int64_t width, linear_block;
  };
  for (const Case& c : {Case{"dense", 8, 0}, Case{"local", 8, 0}, Case{"strided", 8, 0}, Case{"fixed", 8, 0},
                        Case{"dense", 16, 8}, Case{"local", 16, 8}}) {
    SCOPED_TRACE(std::string(c.kind) + " width " + std::to_string(c.width) + " linear block " +
                 std::to_string(c.linear_block));
    nn::MultiHeadAttention attn(tiny(c.width, 2, 16)
                                    .layout(nn::attention_layout_kind_from_string(c.kind))
                                    .window(1)
                                    .stride(2)
                                    .linear_block_size(c.linear_block)
                                    .density(0.5, 2),
                                gen);
    if (c.linear_block) {
      EXPECT_LT(attn.qkv().sparse()->layout()->nnz(), 2 * 6);
    }
    const int64_t B = 2;
    Tensor x = test_randn({B * 16, c.width}, 8);
    EXPECT_TRUE(parameters_gradcheck(attn.named_parameters(), [&] { return attn.forward(x, B); }));
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& a) { return attn.forward(a[0], B); }, {x}));
  }
}

TEST(MultiHeadAttention, DropoutOnlyWhileTraining) {
  Generator gen(7);
  nn::MultiHeadAttention attn(nn::AttentionOptions(8, 2, 16).block_size(8).dropout(0.5), gen);
  Tensor x = test_randn({16, 8}, 9, DType::f32);
  Generator g1(11), g2(11);
  Tensor a = attn.forward(x, 1, g1), b = attn.forward(x, 1, g2);
  EXPECT_TRUE(all_close(a, b, 0, 0));  // same generator state: same mask
  attn.eval();
  Tensor e = attn.forward(x, 1);
  EXPECT_FALSE(all_close(a, e, 1e-6, 1e-6));
  int zeros_in_a = 0;
  for (float v : a.to_vector<float>()) zeros_in_a += v == 0.0f;
  EXPECT_GT(zeros_in_a, 16);
}

}  // namespace
}  // namespace tessera
