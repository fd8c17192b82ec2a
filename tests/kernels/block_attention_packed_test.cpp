// block_attention_packed (the projection's packed rows in and out) against block_attention on
// the unpacked tensors: outputs and the gradient of qkv, with grouped-query heads and dropout
// (the same mask from the same generator state); an f64 gradient check; shape errors.
#include <gtest/gtest.h>

#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
using testing::gradcheck;
using testing::test_randn;

// o [B*T, H*D] of block_attention on qkv's heads moved apart with ops (the reference).
Tensor unpacked(const Tensor& qkv, int64_t B, int64_t H, int64_t K, const AttentionLayoutPtr& l, double p,
                Generator& gen) {
  const int64_t T = l->seq_len(), D = qkv.size(1) / (H + 2 * K);
  const Tensor x = reshape(qkv, {B, T, H + 2 * K, D});
  auto heads = [&](int64_t first, int64_t n) { return permute(slice(x, 2, first, first + n), {0, 2, 1, 3}); };
  const Tensor o = block_attention(heads(0, H), heads(H, K), heads(H + K, K), l, 0, p, gen);
  return reshape(permute(o, {0, 2, 1, 3}), {B * T, H * D});
}

TEST(BlockAttentionPacked, EqualsBlockAttentionOnTheUnpackedHeads) {
  uint64_t seed = 40;
  for (int64_t K : {4, 2, 1})
    for (double p : {0.0, 0.3}) {
      const int64_t B = 3, H = 4, D = 5;
      const AttentionLayoutPtr l = AttentionLayout::strided(32, 8, H, 2);
      const Tensor qkv = test_randn({B * 32, (H + 2 * K) * D}, seed), w = test_randn({B * 32, H * D}, seed + 1);
      seed += 2;
      auto run = [&](bool packed) {
        Tensor x = qkv.clone().requires_grad_();
        Generator gen(17);
        const Tensor o = packed ? block_attention_packed(x, H, K, l, 0, p, gen) : unpacked(x, B, H, K, l, p, gen);
        sum(mul(o, w)).backward();
        return std::vector<Tensor>{o, x.grad()};
      };
      const std::vector<Tensor> a = run(true), b = run(false);
      EXPECT_EQ(a[0].shape(), Shape({B * 32, H * D}));
      EXPECT_TRUE(all_close(a[0], b[0], 1e-12, 1e-12)) << "kv_heads " << K << " p " << p;
      EXPECT_TRUE(all_close(a[1], b[1], 1e-10, 1e-11)) << "dqkv, kv_heads " << K << " p " << p;
    }
}

TEST(BlockAttentionPacked, Gradcheck) {
  const AttentionLayoutPtr l = AttentionLayout::local_window(16, 8, 2, 1);
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) { return block_attention_packed(t[0], 2, 1, l); },
                        {test_randn({2 * 16, 4 * 3}, 1)}));
}

TEST(BlockAttentionPacked, Errors) {
  const AttentionLayoutPtr l = AttentionLayout::dense_causal(16, 8, 4);
  expect_error<ShapeError>([&] { block_attention_packed(test_randn({32, 25}, 1), 4, 2, l); },
                           {"block_attention_packed", "(heads + 2*kv_heads)*D", "[32, 25]"});
  expect_error<ShapeError>([&] { block_attention_packed(test_randn({24, 24}, 1), 4, 2, l); },
                           {"block_attention_packed", "B*16"});
  expect_error<ShapeError>([&] { block_attention_packed(test_randn({32, 24}, 1), 2, 2, l); },
                           {"block_attention_packed", "2 heads", "layout has 4"});
  expect_error<ValueError>([&] { block_attention_packed(test_randn({32, 24}, 1), 4, 3, l); },
                           {"block_attention_packed", "multiple of kv_heads"});
}

}  // namespace
}  // namespace tessera
