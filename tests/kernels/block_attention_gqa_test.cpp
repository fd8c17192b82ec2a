// Grouped-query block attention (k, v with fewer heads than q; multi-query as the limit) on the
// CPU: equal to block attention with each key/value head repeated for its query heads (outputs,
// gradients: dk/dv sum over the group), with dropout too; f64 gradient checks; shape errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
using testing::gradcheck;
using testing::test_randn;

// [B, Hkv, T, D] -> [B, Hkv·G, T, D]: head h of the result is head h / G of x.
Tensor repeat_heads(const Tensor& x, int64_t G) {
  const int64_t B = x.size(0), Hkv = x.size(1), T = x.size(2), D = x.size(3);
  return reshape(expand(reshape(x, {B, Hkv, 1, T, D}), {B, Hkv, G, T, D}), {B, Hkv * G, T, D});
}

// Per-head block masks that differ between the heads of a group.
AttentionLayoutPtr mixed_layout(int64_t T, int64_t bs, int64_t H) {
  const int64_t nb = T / bs;
  std::vector<std::vector<uint8_t>> masks(H, std::vector<uint8_t>(nb * nb, 0));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < nb; ++i)
      for (int64_t j = 0; j <= i; ++j) masks[h][i * nb + j] = i == j || (i + 2 * j + h) % 3 != 0;
  return AttentionLayout::from_masks(T, bs, masks);
}

struct Grads {
  Tensor o, dq, dk, dv;
};

Grads run(const Tensor& q0, const Tensor& k0, const Tensor& v0, const AttentionLayoutPtr& l, int64_t repeat,
          double p, const Tensor& w) {
  Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
  Generator gen(31);
  Tensor o = repeat > 1 ? block_attention(q, repeat_heads(k, repeat), repeat_heads(v, repeat), l, 0, p, gen)
                        : block_attention(q, k, v, l, 0, p, gen);
  sum(mul(o, w)).backward();
  return {o, q.grad(), k.grad(), v.grad()};
}

TEST(BlockAttentionGqa, EqualsRepeatedKeyValueHeads) {
  uint64_t seed = 10;
  for (int64_t Hkv : {1, 2, 3})  // H = 6: multi-query, groups of 3, groups of 2
    for (double p : {0.0, 0.3}) {
      const int64_t H = 6, G = H / Hkv;
      const AttentionLayoutPtr l = mixed_layout(48, 8, H);
      const Tensor q = test_randn({2, H, 48, 5}, seed), k = test_randn({2, Hkv, 48, 5}, seed + 1),
                   v = test_randn({2, Hkv, 48, 5}, seed + 2), w = test_randn({2, H, 48, 5}, seed + 3);
      seed += 4;
      const Grads gqa = run(q, k, v, l, 1, p, w), rep = run(q, k, v, l, G, p, w);
      EXPECT_EQ(gqa.dk.shape(), k.shape());
      EXPECT_TRUE(all_close(gqa.o, rep.o, 1e-12, 1e-12)) << "Hkv " << Hkv << " p " << p;
      EXPECT_TRUE(all_close(gqa.dq, rep.dq, 1e-10, 1e-11)) << "Hkv " << Hkv << " p " << p;
      EXPECT_TRUE(all_close(gqa.dk, rep.dk, 1e-10, 1e-11)) << "Hkv " << Hkv << " p " << p;
      EXPECT_TRUE(all_close(gqa.dv, rep.dv, 1e-10, 1e-11)) << "Hkv " << Hkv << " p " << p;
    }
}

TEST(BlockAttentionGqa, Gradcheck) {
  for (int64_t Hkv : {1, 2}) {
    const AttentionLayoutPtr l = mixed_layout(24, 8, 4);
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) { return block_attention(t[0], t[1], t[2], l); },
                          {test_randn({2, 4, 24, 3}, 1), test_randn({2, Hkv, 24, 3}, 2), test_randn({2, Hkv, 24, 3}, 3)}))
        << "Hkv " << Hkv;
  }
}

TEST(BlockAttentionGqa, Errors) {
  const AttentionLayoutPtr l = AttentionLayout::dense_causal(16, 8, 6);
  const Tensor q = test_randn({1, 6, 16, 4}, 1);
  expect_error<ShapeError>([&] { block_attention(q, test_randn({1, 4, 16, 4}, 2), test_randn({1, 4, 16, 4}, 3), l); },
                           {"block_attention", "multiple of Hkv", "[1, 4, 16, 4]"});
  expect_error<ShapeError>([&] { block_attention(q, test_randn({1, 2, 16, 4}, 2), test_randn({1, 3, 16, 4}, 3), l); },
                           {"block_attention", "k, v [B, Hkv, T, D]"});
}

}  // namespace
}  // namespace tessera
