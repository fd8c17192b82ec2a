// bsmm_dw_pair on the CPU (the reference of its GPU kernel): equal to bsmm_dw on each layout with
// X_b's rows `shift` up, every block size, f32 and f64; the gate-run kernel's work list
// (kernels/common/gate_pair_runs.h) counted by hand; the errors.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/sparse/generators.h"
#include "gradcheck.h"
#include "kernels/common/gate_pair_runs.h"
#include "kernels/ops.h"
#include "layers/lstm.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
using testing::test_randn;

TEST(BsmmDwPair, EqualsBsmmDwOnEachLayout) {
  uint64_t seed = 100;
  for (int64_t bs : {8, 16, 32, 64})
    for (DType dt : {DType::f32, DType::f64})
      for (int64_t shift : {0, 3, 9}) {
        const int64_t n = 9 + 2 * bs;
        const LayoutPtr a = random_layout(2 * bs, 4 * bs, bs, 0.5, ++seed);
        const LayoutPtr b = random_layout(3 * bs, 4 * bs, bs, 0.5, ++seed);
        const Tensor xa = cast(test_randn({n, 2 * bs}, ++seed), dt);
        const Tensor xb = cast(test_randn({n - shift, 3 * bs}, ++seed), dt);
        const Tensor dy = cast(test_randn({n, 4 * bs}, ++seed), dt);
        const auto [dwa, dwb] = bsmm_dw_pair(xa, xb, dy, a, b, shift);
        const std::string what = "bs " + std::to_string(bs) + " " + dtype_name(dt) + " shift " + std::to_string(shift);
        const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
        EXPECT_TRUE(all_close(dwa, bsmm_dw(xa, dy, a), tol, tol)) << what;
        EXPECT_TRUE(all_close(dwb, bsmm_dw(xb, slice(dy, 0, shift, n), b), tol, tol)) << what;
      }
}

// bf16 inputs with f32 outputs: bsmm_dw's f32_output form on each layout (the f32 sums unrounded).
TEST(BsmmDwPair, F32OutputsOfBf16InputsEqualBsmmDwsF32Outputs) {
  const LayoutPtr a = random_layout(64, 128, 32, 0.5, 8), b = random_layout(96, 128, 32, 0.5, 9);
  const Tensor xa = cast(test_randn({40, 64}, 1), DType::bf16), xb = cast(test_randn({33, 96}, 2), DType::bf16),
               dy = cast(test_randn({40, 128}, 3), DType::bf16);
  const auto [dwa, dwb] = bsmm_dw_pair(xa, xb, dy, a, b, 7, /*f32_output=*/true);
  ASSERT_EQ(dwa.dtype(), DType::f32);
  ASSERT_EQ(dwb.dtype(), DType::f32);
  EXPECT_TRUE(all_close(dwa, bsmm_dw(xa, dy, a, Tensor(), true), 1e-6, 1e-6));
  EXPECT_TRUE(all_close(dwb, bsmm_dw(xb, slice(dy, 0, 7, 40), b, Tensor(), true), 1e-6, 1e-6));
  const Tensor fa = cast(xa, DType::f32), fb = cast(xb, DType::f32), fy = cast(dy, DType::f32);
  expect_error<DTypeError>([&] { bsmm_dw_pair(fa, fb, fy, a, b, 7, true); }, {"bsmm_dw_pair", "f32 output"});
}

// With column sums (nn::LSTM's bias gradient from the same dY): the weight gradients unchanged and
// s = col_sum(dY) over all rows (shift or not), f32 for bf16/f32 dY and f64 for f64, the same bits.
TEST(BsmmDwPair, ColumnSumsAreColSumOfDy) {
  const LayoutPtr a = random_layout(64, 128, 32, 0.5, 10), b = random_layout(96, 128, 32, 0.5, 11);
  for (DType dt : {DType::f64, DType::f32, DType::bf16}) {
    const Tensor xa = cast(test_randn({40, 64}, 4), dt), xb = cast(test_randn({33, 96}, 5), dt),
                 dy = cast(test_randn({40, 128}, 6), dt);
    const auto [dwa, dwb, s] = bsmm_dw_pair_and_column_sums(xa, xb, dy, a, b, 7);
    const auto [wa, wb] = bsmm_dw_pair(xa, xb, dy, a, b, 7);
    EXPECT_TRUE(all_close(dwa, wa, 0, 0) && all_close(dwb, wb, 0, 0)) << dtype_name(dt);
    ASSERT_EQ(s.dtype(), dt == DType::f64 ? DType::f64 : DType::f32) << dtype_name(dt);
    EXPECT_EQ(s.shape(), Shape({128}));
    EXPECT_TRUE(all_close(s, col_sum(dy), 0, 0)) << dtype_name(dt);
  }
}

TEST(BsmmDwPair, AllRowsShiftedAwayGiveZeros) {
  const LayoutPtr l = random_layout(16, 32, 8, 0.5, 7);
  const Tensor x = test_randn({4, 16}, 1), dy = test_randn({4, 32}, 2);
  const auto [dwa, dwb] = bsmm_dw_pair(x, zeros({0, 16}, x.dtype()), dy, l, l, 4);
  EXPECT_TRUE(all_close(dwa, bsmm_dw(x, dy, l)));
  EXPECT_TRUE(all_close(dwb, zeros({l->nnz(), 8, 8}, x.dtype())));
}

TEST(BsmmDwPair, BadArgumentsNameTheOp) {
  const LayoutPtr a = random_layout(16, 32, 8, 0.5, 1), b = random_layout(16, 32, 8, 0.5, 2);
  const Tensor x = zeros({6, 16}), dy = zeros({6, 32});
  expect_error<ShapeError>([&] { bsmm_dw_pair(x, zeros({5, 16}), dy, a, b, 2); },
                           {"bsmm_dw_pair", "x_b", "[5, 16]", "shift (2)"});
  expect_error<ShapeError>([&] { bsmm_dw_pair(x, zeros({7, 16}), dy, a, b, -1); }, {"bsmm_dw_pair", "shift"});
  expect_error<ShapeError>([&] { bsmm_dw_pair(x, x, dy, a, random_layout(16, 64, 8, 0.5, 3), 0); },
                           {"bsmm_dw_pair", "out_features"});
  expect_error<ShapeError>([&] { bsmm_dw_pair(x, x, dy, a, random_layout(16, 32, 16, 0.5, 3), 0); },
                           {"bsmm_dw_pair", "block size"});
  expect_error<ShapeError>([&] { bsmm_dw_pair(zeros({6, 8}), x, dy, a, b, 0); }, {"bsmm_dw_pair", "x_a", "[6, 8]"});
  expect_error<DTypeError>([&] { bsmm_dw_pair(x, zeros({6, 16}, DType::f64), dy, a, b, 0); },
                           {"bsmm_dw_pair", "dtype"});
  expect_error<ValueError>([&] { bsmm_dw_pair(x, x, dy, nullptr, b, 0); }, {"bsmm_dw_pair", "layout"});
  EXPECT_FALSE(bsmm_dw_pair_fused(x.meta(), x.meta(), dy.meta(), a, b, 0));  // never on the CPU
}

// Two gate layouts of q = 2 columns a gate: a [3·32, 256] with gate-0 column 0 holding rows 0, 1, 2
// and column 1 row 2; b [2·32, 256] with column 0 rows 0, 1 and column 1 nothing. Runs of at most
// 4: column 0 has 5 entries (a's 3, then b's 2) in runs of 4 and 1, column 1 one.
TEST(GatePairRuns, EntriesAndRunsCountedByHand) {
  const LayoutPtr a = nn::lstm_gate_layout(*BlockLayout::from_mask(96, 64, 32, {1, 0, 1, 0, 1, 1}));
  const LayoutPtr b = nn::lstm_gate_layout(*BlockLayout::from_mask(64, 64, 32, {1, 0, 1, 0}));
  const GatePairRuns t = gate_pair_runs(*a, *b, 2, 4);
  ASSERT_EQ(t.entries.size(), 6u * 5);
  const std::vector<int32_t> codes{0, 1, 2, kPairFromB | 0, kPairFromB | 1, 2};
  for (size_t e = 0; e < codes.size(); ++e) EXPECT_EQ(t.entries[5 * e], codes[e]) << "entry " << e;
  // every entry's four blocks are its row's blocks in gates 0-3 of its own layout (b's after a's)
  const int32_t nnz_a = static_cast<int32_t>(a->nnz());
  std::set<int32_t> seen;
  for (size_t e = 0; e < codes.size(); ++e) {
    const bool from_b = codes[e] & kPairFromB;
    const BlockLayout& l = from_b ? *b : *a;
    const int32_t column = e < 5 ? 0 : 1;
    for (int g = 0; g < 4; ++g) {
      const int32_t k = t.entries[5 * e + 1 + g] - (from_b ? nnz_a : 0);
      ASSERT_GE(k, 0);
      ASSERT_LT(k, l.nnz());
      EXPECT_EQ(l.block_row()[k], codes[e] & (kPairFromB - 1)) << "entry " << e << " gate " << g;
      EXPECT_EQ(l.block_col()[k], column + 2 * g) << "entry " << e << " gate " << g;
      EXPECT_TRUE(seen.insert(t.entries[5 * e + 1 + g]).second) << "block listed twice";
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(a->nnz() + b->nnz()));
  // longest first, ties by column; each column's first run marked
  EXPECT_EQ(t.runs, (std::vector<int32_t>{0, 4, kRunOpensColumn | 0, 4, 1, 0, 5, 1, kRunOpensColumn | 1}));
  EXPECT_TRUE(t.every_column);
  // b's column 1 empty and a's too: no run there
  const LayoutPtr a_only_first = nn::lstm_gate_layout(*BlockLayout::from_mask(96, 64, 32, {1, 0, 1, 0, 1, 0}));
  const GatePairRuns gap = gate_pair_runs(*a_only_first, *b, 2, 4);
  EXPECT_FALSE(gap.every_column);
  EXPECT_EQ(gap.runs, (std::vector<int32_t>{0, 4, kRunOpensColumn | 0, 4, 1, 0}));
  // the runs the pair saves: runs of 4, column 0 ⌈5/4⌉ = 2 = ⌈3/4⌉ + ⌈2/4⌉, column 1 1 = 1 + 0: none;
  // runs of 8, column 0 ⌈5/8⌉ = 1 against 2: one
  const PairRunCounts by4 = pair_run_counts(*a, *b, 2, 4), by8 = pair_run_counts(*a, *b, 2, 8);
  EXPECT_EQ(by4.paired, 3);
  EXPECT_EQ(by4.apart, 3);
  EXPECT_EQ(by8.paired, 2);
  EXPECT_EQ(by8.apart, 3);
  // the rule: at least 1/16 of the runs saved, and some runs at all
  EXPECT_FALSE(pair_pays(by4));
  EXPECT_TRUE(pair_pays(by8));
  EXPECT_TRUE(pair_pays({15, 16}));
  EXPECT_FALSE(pair_pays({31, 32}));
  EXPECT_FALSE(pair_pays({0, 0}));
}

// The gate-run kernel's pair mode replayed on the CPU from the work list alone: per run, per
// entry, per gate g, the block listed for g gets X(source)[t − shift(source)]ᵀ·dY[t, column + g·q]
// over every row t (rows before 0 read as zeros, as the copy's zero fill). Equal to the op's CPU
// result: the list, its b-offset of block numbers, and the columns the kernel reads make dW.
TEST(GatePairRuns, ReplayingTheRunsGivesTheOpsResult) {
  constexpr int64_t bs = 32, q = 4, n = 70, shift = 7;
  const LayoutPtr a = nn::lstm_gate_layout(*random_layout(3 * bs, q * bs, bs, 0.5, 5));
  const LayoutPtr b = nn::lstm_gate_layout(*random_layout(2 * bs, q * bs, bs, 0.75, 6));
  const Tensor xa = test_randn({n, a->in_features()}, 1, DType::f64);
  const Tensor xb = test_randn({n - shift, b->in_features()}, 2, DType::f64);
  const Tensor dy = test_randn({n, 4 * q * bs}, 3, DType::f64);
  const GatePairRuns t = gate_pair_runs(*a, *b, q, 8);
  const int64_t nnz_a = a->nnz();
  std::vector<double> dw((nnz_a + b->nnz()) * bs * bs, 0.0);  // one workspace of both, a's first
  const std::vector<double> va = xa.to_vector<double>(), vb = xb.to_vector<double>(), vy = dy.to_vector<double>();
  std::vector<int> opened(q, 0), runs_of(q, 0);  // the runs marked as their column's first: one a column
  for (size_t r = 0; r < t.runs.size(); r += 3) {
    const int32_t first = t.runs[r], count = t.runs[r + 1], column = t.runs[r + 2] & ~kRunOpensColumn;
    ASSERT_LE(count, 8);
    if (t.runs[r + 2] & kRunOpensColumn) ++opened[column];
    ++runs_of[column];
    for (int32_t e = first; e < first + count; ++e) {
      const int32_t code = t.entries[5 * e];
      const bool from_b = code & kPairFromB;
      const int64_t row = code & (kPairFromB - 1), up = from_b ? shift : 0;
      const int64_t cols = from_b ? b->in_features() : a->in_features();
      const std::vector<double>& x = from_b ? vb : va;
      for (int g = 0; g < 4; ++g) {
        double* out = dw.data() + t.entries[5 * e + 1 + g] * bs * bs;
        for (int64_t s = up; s < n; ++s)
          for (int64_t i = 0; i < bs; ++i)
            for (int64_t j = 0; j < bs; ++j)
              out[i * bs + j] += x[(s - up) * cols + row * bs + i] * vy[s * 4 * q * bs + (column + g * q) * bs + j];
      }
    }
  }
  bool every = true;
  for (int64_t c = 0; c < q; ++c) {
    EXPECT_EQ(opened[c], runs_of[c] > 0 ? 1 : 0) << "column " << c;
    every = every && runs_of[c] > 0;
  }
  EXPECT_EQ(t.every_column, every);
  const auto [want_a, want_b] = bsmm_dw_pair(xa, xb, dy, a, b, shift);
  const std::vector<double> wa = want_a.to_vector<double>(), wb = want_b.to_vector<double>();
  for (size_t i = 0; i < wa.size(); ++i) ASSERT_NEAR(dw[i], wa[i], 1e-9) << "dW_a element " << i;
  for (size_t i = 0; i < wb.size(); ++i) ASSERT_NEAR(dw[wa.size() + i], wb[i], 1e-9) << "dW_b element " << i;
}

}  // namespace
}  // namespace tessera
