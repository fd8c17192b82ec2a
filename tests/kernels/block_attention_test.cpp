// block_attention (and block_attention_backward through it): against dense masked attention
// built from ops, f64 gradient checks per layout kind, isolation of blocks outside the layout,
// bf16, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "attention_masks.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::excluded_mask;
using testing::expect_error;
using testing::gradcheck;
using testing::test_rand;
using testing::test_randn;

// Dense attention from ops: softmax(masked_fill(scale · Q·Kᵀ, excluded, −inf)) · V.
Tensor dense_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& excluded,
                       double scale) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const std::vector<int64_t> flat{B * H, T, D};
  Tensor scores = reshape(mul(matmul(reshape(q, flat), reshape(k, flat), false, true), scale), {B, H, T, T});
  Tensor p = softmax(masked_fill(scores, excluded, -INFINITY));
  return reshape(matmul(reshape(p, {B * H, T, T}), reshape(v, flat)), {B, H, T, D});
}

// Per-head random block masks (about half the causal blocks; the diagonal always).
AttentionLayoutPtr random_layout(int64_t T, int64_t bs, int64_t H, uint64_t seed) {
  const int64_t nb = T / bs;
  std::vector<double> u = test_rand({H, nb, nb}, 0, 1, seed).to_vector<double>();
  std::vector<std::vector<uint8_t>> masks(H, std::vector<uint8_t>(nb * nb, 0));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < nb; ++i)
      for (int64_t j = 0; j <= i; ++j) masks[h][i * nb + j] = i == j || u[(h * nb + i) * nb + j] < 0.5;
  return AttentionLayout::from_masks(T, bs, masks);
}

// One of each layout kind, T = 32 (4 blocks of 8), H = 2.
std::vector<AttentionLayoutPtr> small_layouts() {
  return {AttentionLayout::dense_causal(32, 8, 2), AttentionLayout::local_window(32, 8, 2, 2),
          AttentionLayout::fixed(32, 8, 2, 2, 1), AttentionLayout::strided(32, 8, 2, 2),
          random_layout(32, 8, 2, 7)};
}

// Input gradients of sum(f(q, k, v) · w).
std::vector<Tensor> grads(const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& f,
                          const std::vector<Tensor>& in, const Tensor& w) {
  std::vector<Tensor> x;
  for (const Tensor& t : in) x.push_back(t.clone().requires_grad_());
  sum(mul(f(x[0], x[1], x[2]), w)).backward();
  return {x[0].grad(), x[1].grad(), x[2].grad()};
}

TEST(BlockAttention, DenseCausalLayoutEqualsDenseAttention) {
  for (int64_t bs : {8, 16, 32, 64, 128})
    for (int64_t nblocks : {2, 3}) {
      const int64_t T = nblocks * bs, D = 5;
      auto layout = AttentionLayout::dense_causal(T, bs, 2);
      for (DType dt : {DType::f64, DType::f32}) {
        Tensor q = test_randn({2, 2, T, D}, 1, dt), k = test_randn({2, 2, T, D}, 2, dt);
        Tensor v = test_randn({2, 2, T, D}, 3, dt);
        Tensor ref = dense_attention(q, k, v, excluded_mask(*layout), 1.0 / std::sqrt(5.0));
        const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
        EXPECT_TRUE(all_close(block_attention(q, k, v, layout), ref, tol, tol))
            << "bs=" << bs << " T=" << T << dt;
      }
    }
}

TEST(BlockAttention, SparseLayoutsEqualMaskedDenseAttentionWithGradients) {
  // T = 64 (8 blocks of 8), H = 3, odd D; then a case big enough for the OpenMP path.
  struct Case {
    AttentionLayoutPtr layout;
    int64_t B, D;
    double scale;
  };
  std::vector<Case> cases{{AttentionLayout::local_window(64, 8, 3, 3), 2, 6, 0},
                          {AttentionLayout::fixed(64, 8, 3, 3, 1), 2, 6, 0.3},
                          {AttentionLayout::strided(64, 8, 3, 3), 1, 7, 0},
                          {random_layout(64, 8, 3, 11), 2, 5, 0},
                          {AttentionLayout::strided(128, 16, 2, 3), 2, 16, 0}};
  for (const Case& c : cases) {
    const int64_t H = c.layout->heads(), T = c.layout->seq_len();
    std::vector<Tensor> in{test_randn({c.B, H, T, c.D}, 4), test_randn({c.B, H, T, c.D}, 5),
                           test_randn({c.B, H, T, c.D}, 6)};
    const double scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.D));
    Tensor excluded = excluded_mask(*c.layout);
    auto sparse = [&](const Tensor& q, const Tensor& k, const Tensor& v) {
      return block_attention(q, k, v, c.layout, c.scale);
    };
    auto dense = [&](const Tensor& q, const Tensor& k, const Tensor& v) {
      return dense_attention(q, k, v, excluded, scale);
    };
    Tensor o = sparse(in[0], in[1], in[2]);
    EXPECT_TRUE(all_close(o, dense(in[0], in[1], in[2]), 1e-12, 1e-12)) << c.layout->str();
    Tensor w = test_randn(o.shape(), 8);
    std::vector<Tensor> gs = grads(sparse, in, w), gd = grads(dense, in, w);
    for (int i = 0; i < 3; ++i)
      EXPECT_TRUE(all_close(gs[i], gd[i], 1e-10, 1e-11)) << c.layout->str() << " d" << i;
    // The same again: bitwise identical (no atomics, schedule-independent).
    EXPECT_EQ(sparse(in[0], in[1], in[2]).to_vector<double>(), o.to_vector<double>());
    EXPECT_EQ(grads(sparse, in, w)[1].to_vector<double>(), gs[1].to_vector<double>());
  }
}

TEST(BlockAttention, GradcheckEveryLayoutKind) {
  int64_t seed = 20;
  for (const AttentionLayoutPtr& layout : small_layouts())
    for (int64_t B : {1, 2}) {
      const int64_t D = B == 1 ? 4 : 7;
      std::vector<Tensor> x{test_randn({B, 2, 32, D}, seed), test_randn({B, 2, 32, D}, seed + 1),
                            test_randn({B, 2, 32, D}, seed + 2)};
      seed += 3;
      EXPECT_TRUE(
          gradcheck([&](const std::vector<Tensor>& t) { return block_attention(t[0], t[1], t[2], layout); }, x))
          << layout->str() << " B=" << B;
    }
  // An explicit scale, T = 16 (2 blocks).
  auto layout = AttentionLayout::local_window(16, 8, 2, 1);
  EXPECT_TRUE(
      gradcheck([&](const std::vector<Tensor>& t) { return block_attention(t[0], t[1], t[2], layout, 1.3); },
                {test_randn({2, 2, 16, 8}, 1), test_randn({2, 2, 16, 8}, 2), test_randn({2, 2, 16, 8}, 3)}));
}

TEST(BlockAttention, LogSumExpOutput) {
  auto layout = AttentionLayout::strided(24, 8, 2, 2);
  Tensor q = test_randn({1, 2, 24, 3}, 1), k = test_randn({1, 2, 24, 3}, 2), v = test_randn({1, 2, 24, 3}, 3);
  std::vector<Tensor> out = call<op::BlockAttention>({layout, 0.5}, {q, k, v});
  ASSERT_EQ(out[1].shape(), Shape({1, 2, 24}));
  std::vector<double> qv = q.to_vector<double>(), kv = k.to_vector<double>(), ref;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t t = 0; t < 24; ++t) {
      double z = 0;
      for (int64_t s = 0; s <= t; ++s) {
        if (!layout->has(h, t / 8, s / 8)) continue;
        double dot = 0;
        for (int d = 0; d < 3; ++d) dot += qv[(h * 24 + t) * 3 + d] * kv[(h * 24 + s) * 3 + d];
        z += std::exp(0.5 * dot);
      }
      ref.push_back(std::log(z));
    }
  EXPECT_TRUE(all_close(out[1], ref, 1e-12, 1e-12));
}

// Poisons every (b, h, s, :) of `x` (a [B, H, T, D] f64 tensor) for which bad(h, s).
template <class Bad>
Tensor poison(const Tensor& x, double value, Bad bad) {
  std::vector<double> d = x.to_vector<double>();
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < T; ++s)
        if (bad(h, s))
          for (int64_t e = 0; e < D; ++e) d[((b * H + h) * T + s) * D + e] = value;
  return from_vector(d, x.shape(), DType::f64);
}

TEST(BlockAttention, NeverReadsOutsideTheLayout) {
  auto layout = random_layout(48, 8, 2, 3);  // 6 blocks
  Tensor q = test_randn({2, 2, 48, 4}, 1), k = test_randn({2, 2, 48, 4}, 2), v = test_randn({2, 2, 48, 4}, 3);
  const std::vector<double> o = block_attention(q, k, v, layout).to_vector<double>();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 6; ++i) {
      // NaN in head h's keys/values outside row (h, i)'s blocks and in its other query rows:
      // the rows of (h, i) come out exactly as before.
      auto off_row = [&](int64_t hh, int64_t s) { return hh == h && !layout->has(h, i, s / 8); };
      auto other_q = [&](int64_t hh, int64_t s) { return hh == h && s / 8 != i; };
      std::vector<double> o2 =
          block_attention(poison(q, nan, other_q), poison(k, nan, off_row), poison(v, nan, off_row), layout)
              .to_vector<double>();
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t t = i * 8; t < (i + 1) * 8; ++t)
          for (int64_t e = 0; e < 4; ++e) {
            const int64_t at = ((b * 2 + h) * 48 + t) * 4 + e;
            ASSERT_EQ(o2[at], o[at]) << "h=" << h << " i=" << i << " t=" << t;
          }
    }
}

TEST(BlockAttention, CausalInsideTheDiagonalBlock) {
  auto layout = AttentionLayout::dense_causal(24, 8, 2);
  Tensor q = test_randn({1, 2, 24, 4}, 1), k = test_randn({1, 2, 24, 4}, 2), v = test_randn({1, 2, 24, 4}, 3);
  const std::vector<double> o = block_attention(q, k, v, layout).to_vector<double>();
  for (int64_t t : {0, 3, 8, 13, 23}) {
    // New keys and values after token t (same block and later): rows <= t are unchanged.
    auto later = [&](int64_t, int64_t s) { return s > t; };
    std::vector<double> o2 =
        block_attention(q, poison(k, 5.0, later), poison(v, -7.0, later), layout).to_vector<double>();
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t r = 0; r <= t; ++r)
        for (int64_t e = 0; e < 4; ++e) {
          const int64_t at = (h * 24 + r) * 4 + e;
          ASSERT_EQ(o2[at], o[at]) << "t=" << t << " r=" << r;
        }
    if (t < 23) {
      EXPECT_NE(o2, o) << "t=" << t;  // later rows do see the change
    }
  }
}

TEST(BlockAttention, Bf16ThroughWidenedPath) {
  auto layout = AttentionLayout::fixed(32, 8, 2, 2, 1);
  Tensor q = test_randn({2, 2, 32, 8}, 1, DType::bf16), k = test_randn({2, 2, 32, 8}, 2, DType::bf16);
  Tensor v = test_randn({2, 2, 32, 8}, 3, DType::bf16), w = test_randn({2, 2, 32, 8}, 4, DType::bf16);
  auto f64 = [](const Tensor& t) { return cast(t, DType::f64); };
  auto run = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
    return block_attention(a, b, c, layout);
  };
  Tensor o = run(q, k, v);
  EXPECT_EQ(o.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(o, run(f64(q), f64(k), f64(v)), 1e-2, 1e-2));
  std::vector<Tensor> gh = grads(run, {q, k, v}, w), gd = grads(run, {f64(q), f64(k), f64(v)}, f64(w));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(gh[i].dtype(), DType::bf16);
    EXPECT_TRUE(all_close(gh[i], gd[i], 3e-2, 3e-2)) << "d" << i;
  }
}

TEST(BlockAttention, SymbolicShapes) {
  auto layout = AttentionLayout::local_window(32, 8, 2, 2);
  Tensor s = symbolic({3, 2, 32, 4}, DType::f32);
  Tensor o = block_attention(s, s, s, layout);
  EXPECT_TRUE(o.is_symbolic());
  EXPECT_EQ(o.shape(), Shape({3, 2, 32, 4}));
}

TEST(BlockAttention, Errors) {
  auto layout = AttentionLayout::dense_causal(32, 8, 2);
  Tensor x = zeros({1, 2, 32, 4}, DType::f64);
  expect_error<ShapeError>(
      [&] {
        block_attention(zeros({1, 3, 32, 4}), zeros({1, 3, 32, 4}), zeros({1, 3, 32, 4}), layout);
      },
      {"block_attention", "[1, 3, 32, 4]", "H=3", "2 heads"});
  expect_error<ShapeError>(
      [&] {
        block_attention(zeros({1, 2, 24, 4}), zeros({1, 2, 24, 4}), zeros({1, 2, 24, 4}), layout);
      },
      {"block_attention", "[1, 2, 24, 4]", "T=24", "T=32"});
  expect_error<ShapeError>(
      [&] {
        block_attention(x, zeros({1, 2, 32, 5}, DType::f64), x, layout);
      },
      {"block_attention", "[1, 2, 32, 4]", "[1, 2, 32, 5]"});
  expect_error<ShapeError>(
      [&] {
        block_attention(zeros({2, 32, 4}), zeros({2, 32, 4}), zeros({2, 32, 4}), layout);
      },
      {"block_attention", "[2, 32, 4]", "[B, H, T, D]"});
  expect_error<DTypeError>(
      [&] {
        block_attention(x, zeros({1, 2, 32, 4}), x, layout);
      },
      {"block_attention", "f32", "f64"});
  expect_error<DTypeError>(
      [&] {
        block_attention(zeros({1, 2, 32, 4}, DType::i32), x, x, layout);
      },
      {"block_attention"});
  expect_error<ValueError>([&] { block_attention(x, x, x, nullptr); }, {"block_attention", "layout"});
  expect_error<ShapeError>(
      [&] {
        block_attention_backward(x, x, x, x, x, zeros({1, 2, 32}), layout);
      },
      {"block_attention_backward", "lse", "f32[1, 2, 32]"});
}

}  // namespace
}  // namespace tessera
