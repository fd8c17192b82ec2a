// nn::MultiHeadAttention with grouped-query attention (kv_heads < heads; 1 = multi-query): the
// qkv projection's width, the fused path against the dense one (which repeats the key/value
// heads) with dropout, parameter gradient checks, decoding against forward, errors.
#include <gtest/gtest.h>

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
using testing::parameters_gradcheck;
using testing::test_randn;

// Width 24, 4 heads (D = 6), T = 32 in blocks of 8.
nn::AttentionOptions gqa(int64_t kv_heads) {
  return nn::AttentionOptions(24, 4, 32).block_size(8).kv_heads(kv_heads).dtype(DType::f64);
}

TEST(MultiHeadAttentionGqa, ProjectionWidthAndBothPathsAgree) {
  for (int64_t kv : {1, 2}) {
    Generator i1(3), i2(3);
    nn::MultiHeadAttention fused(gqa(kv).attention_dropout(0.2), i1),
        dense(gqa(kv).attention_dropout(0.2).impl(Impl::dense), i2);
    EXPECT_EQ(fused.options().kv_heads(), kv);
    EXPECT_EQ(fused.qkv().module()->named_parameters()[0].tensor.numel(), 24 * (24 + 2 * kv * 6)) << "q | k | v columns";
    const int64_t B = 2;
    const Tensor x = test_randn({B * 32, 24}, 4), w = test_randn({B * 32, 24}, 5);
    Generator g1(9), g2(9);
    const Tensor a = fused.forward(x, B, g1), b = dense.forward(x, B, g2);
    EXPECT_TRUE(all_close(a, b, 1e-12, 1e-12)) << "kv_heads " << kv;
    sum(mul(fused.forward(x, B, g1), w)).backward();
    sum(mul(dense.forward(x, B, g2), w)).backward();
    const auto pf = fused.named_parameters(), pd = dense.named_parameters();
    for (size_t i = 0; i < pf.size(); ++i)
      EXPECT_TRUE(all_close(pf[i].tensor.grad(), pd[i].tensor.grad(), 1e-10, 1e-11)) << pf[i].name << " kv " << kv;
  }
}

TEST(MultiHeadAttentionGqa, ParameterGradcheck) {
  Generator init(6);
  nn::MultiHeadAttention attn(nn::AttentionOptions(12, 4, 16).block_size(8).kv_heads(2).dtype(DType::f64)
                                  .layout(Kind::local).window(1),
                              init);
  const Tensor x = test_randn({2 * 16, 12}, 7);
  EXPECT_TRUE(parameters_gradcheck(attn.named_parameters(), [&] { return attn.forward(x, 2); }));
}

TEST(MultiHeadAttentionGqa, DecodingEqualsForward) {
  Generator init(8);
  nn::MultiHeadAttention attn(gqa(1).layout(Kind::strided).stride(2), init);
  attn.eval();
  const int64_t B = 2, T = 32;
  const Tensor x = test_randn({B * T, 24}, 9);
  const std::vector<double> want = attn.forward(x, B).to_vector<double>();
  nn::KVCache cache;
  const std::vector<double> xs = x.to_vector<double>();
  for (int64_t t = 0; t < T; ++t) {  // one position of both sequences at a time
    std::vector<double> row;
    for (int64_t b = 0; b < B; ++b) row.insert(row.end(), xs.begin() + (b * T + t) * 24, xs.begin() + (b * T + t + 1) * 24);
    const std::vector<double> y = attn.decode(from_vector(row, {B, 24}), B, cache).to_vector<double>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < 24; ++c)
        EXPECT_NEAR(y[b * 24 + c], want[(b * T + t) * 24 + c], 1e-10) << "b " << b << " t " << t;
  }
  EXPECT_EQ(cache.k.shape(), Shape({B, 1, T, 6})) << "the cache holds the key/value heads only";
  nn::KVCache wrong{cast(zeros({B, 4, 3, 6}), DType::f64), cast(zeros({B, 4, 3, 6}), DType::f64), 3};
  expect_error<ShapeError>([&] { attn.decode(test_randn({B, 24}, 10), B, wrong); },
                           {"MultiHeadAttention::decode", "the cache holds", "expected [2, 1, 3, 6]"});
}

TEST(MultiHeadAttentionGqa, Errors) {
  Generator gen(1);
  expect_error<ValueError>([&] { nn::MultiHeadAttention(gqa(3), gen); }, {"MultiHeadAttention", "kv_heads 3", "heads 4"});
  expect_error<ValueError>([&] { nn::MultiHeadAttention(gqa(-1), gen); }, {"MultiHeadAttention", "kv_heads"});
}

}  // namespace
}  // namespace tessera
