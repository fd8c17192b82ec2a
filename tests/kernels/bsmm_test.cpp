#include <gtest/gtest.h>
#include <omp.h>

#include "core/autocast.h"
#include "core/sparse/generators.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::dense_from_blocks;
using testing::expect_error;
using testing::gradcheck;
using testing::test_randn;

// C [m, n] = op(A)·op(B) with plain loops; A [m, p] (or [p, m] when ta), B [p, n] (or [n, p] when tb).
std::vector<double> ref_mm(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t n, int64_t p,
                           bool ta = false, bool tb = false) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t q = 0; q < p; ++q) c[i * n + j] += (ta ? a[q * m + i] : a[i * p + q]) * (tb ? b[j * p + q] : b[q * n + j]);
  return c;
}

// Layouts of every block size, random and hand-made with an empty block row and an empty column.
std::vector<LayoutPtr> test_layouts() {
  std::vector<LayoutPtr> ls;
  for (int64_t bs : {8, 16, 32, 64}) {
    // Every generator: random, Barabási–Albert, Watts–Strogatz, balanced (6x6 blocks where square).
    ls.push_back(random_layout(3 * bs, 5 * bs, bs, 0.4, static_cast<uint64_t>(bs)));
    ls.push_back(barabasi_albert_layout(6 * bs, 6 * bs, bs, 2, static_cast<uint64_t>(bs) + 1));
    ls.push_back(watts_strogatz_layout(6 * bs, 6 * bs, bs, 2, 0.3, static_cast<uint64_t>(bs) + 2));
    ls.push_back(balanced_random_layout(6 * bs, 3 * bs, bs, 2, static_cast<uint64_t>(bs) + 3));
    ls.push_back(dense_layout(2 * bs, 2 * bs, bs));
    // 3x4 blocks: row 1 and column 2 empty.
    ls.push_back(BlockLayout::from_mask(3 * bs, 4 * bs, bs, {1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1}));
  }
  return ls;
}

// Small layouts of each block size for gradchecks: 2x3 blocks with block (1, 1) missing and
// column 2 holding a single block.
LayoutPtr grad_layout(int64_t bs) { return BlockLayout::from_mask(2 * bs, 3 * bs, bs, {1, 1, 0, 1, 0, 1}); }

TEST(Bsmm, HandComputedSingleBlock) {
  // 2x2 blocks of 8, only block (0, 1) stored, holding 2·I: y[:, 0:8] = 0, y[:, 8:16] = 2·x[:, 0:8].
  LayoutPtr l = BlockLayout::from_mask(16, 16, 8, {0, 1, 0, 0});
  std::vector<double> eye(64, 0.0);
  for (int i = 0; i < 8; ++i) eye[i * 9] = 2.0;
  Tensor w = from_vector(eye, {1, 8, 8});
  Tensor x = reshape(arange(0, 48, 1, DType::f64), {3, 16});
  Tensor y = bsmm(x, w, l);
  std::vector<double> expect(48, 0.0);
  for (int n = 0; n < 3; ++n)
    for (int j = 0; j < 8; ++j) expect[n * 16 + 8 + j] = 2.0 * (n * 16 + j);
  EXPECT_TRUE(all_close(y, expect));
  // With gate 0.5 the block is I.
  Tensor yg = bsmm(x, w, l, tensor({0.5}, DType::f64));
  for (double& e : expect) e *= 0.5;
  EXPECT_TRUE(all_close(yg, expect));
}

TEST(Bsmm, AllOpsMatchMaskedDenseMatmul) {
  uint64_t seed = 10;
  for (const LayoutPtr& l : test_layouts())
    for (int64_t n : {1, 7, 300})  // 300 spans two row tiles
      for (bool gated : {false, true}) {
        const int64_t C = l->in_features(), K = l->out_features(), bs = l->block_size();
        Tensor x = test_randn({n, C}, ++seed), dy = test_randn({n, K}, ++seed);
        Tensor w = test_randn({l->nnz(), bs, bs}, ++seed), gate = gated ? test_randn({l->nnz()}, ++seed) : Tensor();
        std::vector<double> wd = dense_from_blocks(w, *l, gate);
        SCOPED_TRACE(l->str() + " N=" + std::to_string(n) + (gated ? " gated" : ""));
        EXPECT_TRUE(all_close(bsmm(x, w, l, gate), ref_mm(x.to_vector<double>(), wd, n, K, C), 1e-12, 1e-12));
        EXPECT_TRUE(all_close(bsmm_dx(dy, w, l, gate), ref_mm(dy.to_vector<double>(), wd, n, C, K, false, true), 1e-12,
                              1e-12));
        if (gated) continue;
        // dw: the layout's blocks of the dense Xᵀ·dY [C, K].
        std::vector<double> full = ref_mm(x.to_vector<double>(), dy.to_vector<double>(), C, K, n, true), dw;
        for (int64_t k = 0; k < l->nnz(); ++k)
          for (int64_t i = 0; i < bs; ++i)
            for (int64_t j = 0; j < bs; ++j)
              dw.push_back(full[(l->block_row()[k] * bs + i) * K + l->block_col()[k] * bs + j]);
        EXPECT_TRUE(all_close(bsmm_dw(x, dy, l), dw, 1e-12, 1e-12));
      }
}

TEST(Bsmm, EmptyColumnsAreZeroAndF32MatchesF64) {
  LayoutPtr l = BlockLayout::from_mask(48, 64, 16, {1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1});
  Tensor x = test_randn({5, 48}, 3, DType::f32), w = test_randn({4, 16, 16}, 4, DType::f32);
  Tensor y = bsmm(x, w, l);
  std::vector<double> yv = y.to_vector<double>(), ref = ref_mm(x.to_vector<double>(), dense_from_blocks(w, *l), 5, 64, 48);
  EXPECT_TRUE(all_close(y, ref, 1e-5, 1e-5));
  for (int64_t n = 0; n < 5; ++n)
    for (int64_t j = 32; j < 48; ++j) EXPECT_EQ(yv[n * 64 + j], 0.0);  // block column 2 stores nothing
  Tensor yh = bsmm(test_randn({5, 48}, 3, DType::bf16), test_randn({4, 16, 16}, 4, DType::bf16), l);
  EXPECT_EQ(yh.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(yh, ref, 3e-2, 3e-1));
}

TEST(Bsmm, DeterministicAcrossThreadCounts) {
  LayoutPtr l = random_layout(256, 512, 32, 0.3, 5);
  Tensor x = test_randn({515, 256}, 1, DType::f32), w = test_randn({l->nnz(), 32, 32}, 2, DType::f32);
  Tensor dy = test_randn({515, 512}, 3, DType::f32), gate = test_randn({l->nnz()}, 4, DType::f32);
  const int threads = omp_get_max_threads();
  std::vector<std::vector<float>> runs[2];
  for (int t : {threads, 1}) {
    omp_set_num_threads(t);
    runs[t == 1].push_back(bsmm(x, w, l, gate).to_vector<float>());
    runs[t == 1].push_back(bsmm_dx(dy, w, l, gate).to_vector<float>());
    runs[t == 1].push_back(bsmm_dw(x, dy, l).to_vector<float>());
  }
  omp_set_num_threads(threads);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(runs[0][i], runs[1][i]) << "output " << i;
}

TEST(Bsmm, EmptyBatch) {
  LayoutPtr l = grad_layout(8);
  EXPECT_EQ(bsmm(zeros({0, 16}), zeros({4, 8, 8}), l).shape(), Shape({0, 24}));
  EXPECT_EQ(bsmm_dx(zeros({0, 24}), zeros({4, 8, 8}), l).shape(), Shape({0, 16}));
  EXPECT_TRUE(all_close(bsmm_dw(zeros({0, 16}), zeros({0, 24}), l), std::vector<double>(256, 0.0)));
}

TEST(Bsmm, SymbolicShapes) {
  LayoutPtr l = random_layout(64, 96, 32, 0.5, 1);
  Tensor y = bsmm(symbolic({9, 64}), symbolic({l->nnz(), 32, 32}), l);
  EXPECT_TRUE(y.is_symbolic());
  EXPECT_EQ(y.shape(), Shape({9, 96}));
  EXPECT_EQ(bsmm_dx(symbolic({9, 96}), symbolic({l->nnz(), 32, 32}), l).shape(), Shape({9, 64}));
  EXPECT_EQ(bsmm_dw(symbolic({9, 64}), symbolic({9, 96}), l).shape(), Shape({l->nnz(), 32, 32}));
}

TEST(Bsmm, GradientsOfEveryOp) {
  for (int64_t bs : {8, 16, 32, 64}) {
    LayoutPtr l = grad_layout(bs);
    const int64_t C = l->in_features(), K = l->out_features(), nnz = l->nnz();
    for (int64_t n : {1, 3}) {
      SCOPED_TRACE("bs=" + std::to_string(bs) + " N=" + std::to_string(n));
      Tensor x = test_randn({n, C}, 1), dy = test_randn({n, K}, 2), w = test_randn({nnz, bs, bs}, 3);
      Tensor gate = test_randn({nnz}, 4);
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& a) { return bsmm(a[0], a[1], l); }, {x, w}));
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& a) { return bsmm(a[0], a[1], l, a[2]); }, {x, w, gate}));
      const Tensor bias = test_randn({K}, 5);
      EXPECT_TRUE(
          gradcheck([&](const std::vector<Tensor>& a) { return bsmm(a[0], a[1], l, Tensor(), a[2]); }, {x, w, bias}));
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& a) { return bsmm(a[0], a[1], l, a[2], a[3]); },
                            {x, w, gate, bias}));
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& a) { return bsmm_dx(a[0], a[1], l); }, {dy, w}));
      EXPECT_TRUE(
          gradcheck([&](const std::vector<Tensor>& a) { return bsmm_dx(a[0], a[1], l, a[2]); }, {dy, w, gate}));
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& a) { return bsmm_dw(a[0], a[1], l); }, {x, dy}));
    }
  }
}

// The bias input: bsmm(x, w, l, gate, b) = bsmm(x, w, l, gate) + b on every row (empty block
// columns included), in f64 and f32; with an f32 output of bf16 operands (autocast's form) the
// bias is f32 and its gradient the column sums of dY (cast_col_sum's); the errors.
TEST(Bsmm, BiasIsAddedToEveryRow) {
  for (DType dt : {DType::f64, DType::f32})
    for (int64_t bs : {8, 32}) {
      const LayoutPtr l =  // 2 x 3 blocks, block column 1 empty
          BlockLayout::from_mask(2 * bs, 3 * bs, bs, std::vector<uint8_t>{1, 0, 1, 1, 0, 0});
      const Tensor x = test_randn({5, l->in_features()}, 1, dt), w = test_randn({l->nnz(), bs, bs}, 2, dt);
      const Tensor gate = test_randn({l->nnz()}, 3, dt), b = test_randn({l->out_features()}, 4, dt);
      for (bool gated : {false, true}) {
        const Tensor g = gated ? gate : Tensor();
        EXPECT_TRUE(all_close(bsmm(x, w, l, g, b), add(bsmm(x, w, l, g), b), 1e-12, 1e-6))
            << dtype_name(dt) << " bs " << bs << (gated ? " gated" : "");
      }
    }
  const LayoutPtr l = grad_layout(8);
  const Tensor x = cast(test_randn({5, 16}, 1, DType::f32), DType::bf16);
  const Tensor w = cast(test_randn({4, 8, 8}, 2, DType::f32), DType::bf16);
  const Tensor b = test_randn({24}, 3, DType::f32).requires_grad_();
  const Tensor y = call<op::Bsmm>({l, false, true, true}, {x, w, b})[0];
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_TRUE(all_close(y, add(call<op::Bsmm>({l, false, true}, {x, w})[0], b), 1e-6, 1e-6));
  const Tensor dy = test_randn({5, 24}, 4, DType::f32);
  sum(mul(y, dy)).backward();
  EXPECT_TRUE(all_close(b.grad(), sum(dy, 0), 1e-6, 1e-6));
  // under autocast, a bias of another dtype is taken in f32
  {
    autocast::Guard amp(DType::bf16);
    const Tensor y16 = bsmm(cast(x, DType::f32), cast(w, DType::f32), l, Tensor(), cast(b.detach(), DType::bf16));
    EXPECT_EQ(y16.dtype(), DType::f32);
  }
  expect_error<ShapeError>([&] { bsmm(zeros({3, 16}), zeros({4, 8, 8}), l, Tensor(), zeros({16})); },
                           {"bsmm", "bias", "[16]", "[24]"});
  expect_error<DTypeError>([&] { call<op::Bsmm>({l, false, true, true}, {x, w, cast(b.detach(), DType::bf16)}); },
                           {"bsmm", "bias", "f32"});
}

// bsmm(..., bias, low) under autocast: y in the low dtype, bitwise cast(bsmm(..., bias), low), the
// gate's and the bias's gradients f32 and equal to that formulation's (the bias's: the column sums
// of the low-dtype dY, col_sum); the op's f32_bias checks.
TEST(Bsmm, AutocastLowOutputIsTheF32OutputRoundedOnce) {
  const LayoutPtr l = grad_layout(8);  // C = 16, K = 24, nnz = 4
  const Tensor x = test_randn({7, 16}, 31, DType::f32), w0 = test_randn({4, 8, 8}, 32, DType::f32);
  const Tensor gate0 = test_randn({4}, 33, DType::f32), b0 = test_randn({24}, 34, DType::f32);
  const Tensor g = test_randn({7, 24}, 35, DType::f32);
  for (DType low : {DType::bf16, DType::f16})
    for (bool gated : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(low)) + (gated ? " gated" : ""));
      Tensor w1 = w0.clone().requires_grad_(), b1 = b0.clone().requires_grad_(), t1 = gate0.clone().requires_grad_();
      Tensor w2 = w0.clone().requires_grad_(), b2 = b0.clone().requires_grad_(), t2 = gate0.clone().requires_grad_();
      Tensor x1 = x.clone().requires_grad_(), x2 = x.clone().requires_grad_();
      Tensor y1, y2;
      {
        autocast::Guard amp(low);
        y1 = bsmm(x1, w1, l, gated ? t1 : Tensor(), b1, low);
        y2 = cast(bsmm(x2, w2, l, gated ? t2 : Tensor(), b2), low);
      }
      ASSERT_EQ(y1.dtype(), low);
      EXPECT_TRUE(all_close(y1, y2, 0, 0));
      y1.backward(cast(g, low));
      y2.backward(cast(g, low));
      EXPECT_TRUE(all_close(x1.grad(), x2.grad(), 0, 0));
      EXPECT_EQ(w1.grad().dtype(), DType::f32);
      EXPECT_TRUE(all_close(w1.grad(), w2.grad(), 0, 0));
      EXPECT_EQ(b1.grad().dtype(), DType::f32);
      EXPECT_TRUE(all_close(b1.grad(), b2.grad(), 0, 0));
      if (gated) {
        EXPECT_TRUE(all_close(t1.grad(), t2.grad(), 0, 0));
      }
    }
  EXPECT_EQ(bsmm(x, w0, l, Tensor(), b0, DType::f32).dtype(), DType::f32);
  expect_error<DTypeError>([&] { bsmm(x, w0, l, Tensor(), b0, DType::bf16); }, {"bsmm", "bf16", "autocast"});
  const Tensor xh = cast(x, DType::bf16), wh = cast(w0, DType::bf16);
  EXPECT_EQ(call<op::Bsmm>({l, false, false, true, true}, {xh, wh, b0})[0].dtype(), DType::bf16);
  expect_error<DTypeError>([&] { call<op::Bsmm>({l, false, false, true, true}, {xh, wh, cast(b0, DType::bf16)}); },
                           {"bsmm", "bias", "f32"});
  expect_error<DTypeError>([&] { call<op::Bsmm>({l, false, false, true, true}, {x, w0, b0}); }, {"bsmm", "f32 bias"});
}

TEST(Bsmm, GradientOnlyWhereNeeded) {
  LayoutPtr l = grad_layout(8);
  Tensor x = test_randn({3, 16}, 1), w = test_randn({4, 8, 8}, 2).requires_grad_(), gate = test_randn({4}, 3);
  sum(bsmm(x, w, l, gate)).backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().shape(), Shape({4, 8, 8}));
  EXPECT_FALSE(x.grad().defined());
}

TEST(Bsmm, ErrorsNameOpAndShapes) {
  LayoutPtr l = grad_layout(8);  // C = 16, K = 24, nnz = 4
  Tensor x = zeros({3, 16}), w = zeros({4, 8, 8}), dy = zeros({3, 24});
  expect_error<ShapeError>([&] { bsmm(zeros({3, 17}), w, l); }, {"bsmm", "[3, 17]", "16"});
  expect_error<ShapeError>([&] { bsmm(zeros({16}), w, l); }, {"bsmm", "[16]"});
  expect_error<ShapeError>([&] { bsmm(x, zeros({5, 8, 8}), l); }, {"bsmm", "[5, 8, 8]", "[4, 8, 8]", "[3, 16]"});
  expect_error<ShapeError>([&] { bsmm(x, w, l, zeros({3})); }, {"bsmm", "gate", "[3]", "[4]"});
  expect_error<DTypeError>([&] { bsmm(x, zeros({4, 8, 8}, DType::f64), l); }, {"bsmm"});
  expect_error<DTypeError>([&] { bsmm(zeros({3, 16}, DType::i32), zeros({4, 8, 8}, DType::i32), l); }, {"bsmm"});
  expect_error<ValueError>([&] { bsmm(x, w, nullptr); }, {"bsmm", "layout"});
  expect_error<ShapeError>([&] { bsmm_dx(x, w, l); }, {"bsmm_dx", "dy", "[3, 16]", "24"});
  expect_error<ShapeError>([&] { bsmm_dx(dy, zeros({4, 16, 16}), l); }, {"bsmm_dx", "[4, 16, 16]"});
  expect_error<ShapeError>([&] { bsmm_dw(x, zeros({2, 24}), l); }, {"bsmm_dw", "[3, 16]", "[2, 24]"});
  expect_error<ShapeError>([&] { bsmm_dw(x, zeros({3, 16}), l); }, {"bsmm_dw", "dy", "[3, 16]"});
}

// The epilogues: bsmm with an f32 output of bf16 operands (autocast's form) equals the f32
// product of the bf16 values; bsmm_dw's f32 output and accumulate mode give acc + Xᵀ·dY.
TEST(Bsmm, F32OutputAndAccumulateEpilogues) {
  for (int64_t bs : {8, 32}) {
    LayoutPtr l = random_layout(4 * bs, 3 * bs, bs, 0.5, static_cast<uint64_t>(bs));
    const Tensor x = cast(test_randn({5, l->in_features()}, 1, DType::f32), DType::bf16);
    const Tensor w = cast(test_randn({l->nnz(), bs, bs}, 2, DType::f32), DType::bf16);
    const Tensor dy = cast(test_randn({5, l->out_features()}, 3, DType::f32), DType::bf16);
    const Tensor y = call<op::Bsmm>({l, false, true}, {x, w})[0];
    EXPECT_EQ(y.dtype(), DType::f32);
    EXPECT_TRUE(all_close(y, bsmm(cast(x, DType::f32), cast(w, DType::f32), l), 1e-6, 1e-6));
    const Tensor dw32 = bsmm_dw(cast(x, DType::f32), cast(dy, DType::f32), l);
    const Tensor acc = test_randn({l->nnz(), bs, bs}, 4, DType::f32);
    const Tensor dw = bsmm_dw(x, dy, l, Tensor(), true);
    EXPECT_EQ(dw.dtype(), DType::f32);
    EXPECT_TRUE(all_close(dw, dw32, 1e-6, 1e-6));
    EXPECT_TRUE(all_close(bsmm_dw(x, dy, l, acc, true), add(acc, dw32), 1e-6, 1e-6));
    const Tensor acc16 = cast(acc, DType::bf16);
    EXPECT_TRUE(all_close(bsmm_dw(x, dy, l, acc16, false), cast(add(acc16, bsmm_dw(x, dy, l)), DType::bf16), 2e-2,
                          2e-2));
  }
  LayoutPtr l = grad_layout(8);
  expect_error<DTypeError>([&] { call<op::Bsmm>({l, false, true}, {zeros({3, 16}), zeros({4, 8, 8})}); },
                           {"bsmm", "f32 output"});
  expect_error<DTypeError>([&] { bsmm_dw(zeros({3, 16}), zeros({3, 24}), l, Tensor(), true); },
                           {"bsmm_dw", "f32 output"});
  expect_error<ShapeError>([&] { bsmm_dw(zeros({3, 16}), zeros({3, 24}), l, zeros({3, 8, 8}), false); },
                           {"bsmm_dw", "accumulated", "[3, 8, 8]"});
}

TEST(Bsmm, GradientsOfTheAccumulateMode) {
  for (int64_t bs : {8, 16}) {
    LayoutPtr l = grad_layout(bs);
    Tensor x = test_randn({3, l->in_features()}, 1), dy = test_randn({3, l->out_features()}, 2);
    Tensor acc = test_randn({l->nnz(), bs, bs}, 3);
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& a) { return bsmm_dw(a[0], a[1], l, a[2], false); },
                          {x, dy, acc}));
  }
}

// The gate epilogue of bsmm_dw: dw = gate·P (+ acc), dgate = sum over each block of P ⊙ w,
// against P from the ungated op and sums in f64 here, on a layout with empty rows and columns;
// the f32 outputs of bf16 inputs are P's f32 sums (not rounded to bf16 first).
TEST(Bsmm, GatedWeightGradientIsTheGateTimesPAndTheBlockSumsOfPTimesW) {
  for (int64_t bs : {8, 16, 32, 64}) {
    LayoutPtr l = random_layout(5 * bs, 4 * bs, bs, 0.4, static_cast<uint64_t>(bs) + 40);
    const int64_t nnz = l->nnz(), e = bs * bs;
    for (int64_t n : {0, 1, 7}) {
      SCOPED_TRACE(l->str() + " N=" + std::to_string(n));
      const Tensor x = test_randn({n, l->in_features()}, 1), dy = test_randn({n, l->out_features()}, 2);
      const Tensor w = test_randn({nnz, bs, bs}, 3), gate = test_randn({nnz}, 4), acc = test_randn({nnz, bs, bs}, 5);
      const std::vector<double> p = bsmm_dw(x, dy, l).to_vector<double>(), wv = w.to_vector<double>(),
                                gv = gate.to_vector<double>(), av = acc.to_vector<double>();
      std::vector<double> want_dw(p.size()), want_acc(p.size()), want_dgate(nnz, 0.0);
      for (int64_t k = 0; k < nnz; ++k)
        for (int64_t i = 0; i < e; ++i) {
          want_dw[k * e + i] = gv[k] * p[k * e + i];
          want_acc[k * e + i] = av[k * e + i] + want_dw[k * e + i];
          want_dgate[k] += p[k * e + i] * wv[k * e + i];
        }
      auto [dw, dgate] = bsmm_dw_gated(x, dy, w, gate, l, false);
      EXPECT_EQ(dgate.shape(), Shape({nnz}));
      EXPECT_TRUE(all_close(dw, want_dw, 1e-12, 1e-12));
      EXPECT_TRUE(all_close(dgate, want_dgate, 1e-12, 1e-12));
      const std::vector<Tensor> out = call<op::BsmmDw>({l, false, true, true}, {x, dy, w, gate, acc});
      EXPECT_TRUE(all_close(out[0], want_acc, 1e-12, 1e-12));
      EXPECT_TRUE(all_close(out[1], want_dgate, 1e-12, 1e-12));
    }
    const Tensor x16 = cast(test_randn({9, l->in_features()}, 6, DType::f32), DType::bf16);
    const Tensor dy16 = cast(test_randn({9, l->out_features()}, 7, DType::f32), DType::bf16);
    const Tensor w16 = cast(test_randn({nnz, bs, bs}, 8, DType::f32), DType::bf16);
    const Tensor g16 = cast(test_randn({nnz}, 9, DType::f32), DType::bf16);
    auto [dw32, dgate32] = bsmm_dw_gated(x16, dy16, w16, g16, l, true);
    auto [dw_ref, dgate_ref] = bsmm_dw_gated(cast(x16, DType::f32), cast(dy16, DType::f32), cast(w16, DType::f32),
                                             cast(g16, DType::f32), l, false);
    EXPECT_EQ(dw32.dtype(), DType::f32);
    EXPECT_EQ(dgate32.dtype(), DType::f32);
    EXPECT_TRUE(all_close(dw32, dw_ref, 1e-6, 1e-6));
    EXPECT_TRUE(all_close(dgate32, dgate_ref, 1e-5, 1e-5));
  }
  LayoutPtr l = grad_layout(8);  // C = 16, K = 24, nnz = 4
  const Tensor x = zeros({3, 16}), dy = zeros({3, 24});
  expect_error<ShapeError>([&] { bsmm_dw_gated(x, dy, zeros({4, 8, 8}), zeros({5}), l, false); },
                           {"bsmm_dw", "gate", "[5]", "[4]"});
  expect_error<ShapeError>([&] { bsmm_dw_gated(x, dy, zeros({3, 8, 8}), zeros({4}), l, false); },
                           {"bsmm_dw", "weight", "[3, 8, 8]"});
  expect_error<DTypeError>([&] { bsmm_dw_gated(x, dy, zeros({4, 8, 8}), zeros({4}, DType::f64), l, false); },
                           {"bsmm_dw"});
}

// The gated form is differentiable in all its inputs (x, dy, w, gate, acc), both outputs.
TEST(Bsmm, GradientsOfTheGatedWeightGradient) {
  for (int64_t bs : {8, 16}) {
    LayoutPtr l = grad_layout(bs);
    const int64_t nnz = l->nnz();
    Tensor x = test_randn({3, l->in_features()}, 1), dy = test_randn({3, l->out_features()}, 2);
    Tensor w = test_randn({nnz, bs, bs}, 3), gate = test_randn({nnz}, 4), acc = test_randn({nnz, bs, bs}, 5);
    auto both = [&](const std::vector<Tensor>& out) { return concat({reshape(out[0], {nnz * bs * bs}), out[1]}); };
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& a) { return both(call<op::BsmmDw>({l, false, false, true}, a)); },
        {x, dy, w, gate}));
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& a) { return both(call<op::BsmmDw>({l, false, true, true}, a)); },
        {x, dy, w, gate, acc}));
  }
}

}  // namespace
}  // namespace tessera
