#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/sparse/generators.h"

namespace tessera {
namespace {

const int64_t kBlockSizes[] = {8, 16, 32, 64};

// Blocks per output column (fan-in) and per input row (fan-out), recounted from the mask.
std::vector<int64_t> col_counts(const BlockLayout& l) {
  std::vector<int64_t> n(l.block_cols(), 0);
  auto m = l.mask();
  for (int64_t r = 0; r < l.block_rows(); ++r)
    for (int64_t c = 0; c < l.block_cols(); ++c) n[c] += m[r * l.block_cols() + c];
  return n;
}
std::vector<int64_t> row_counts(const BlockLayout& l) {
  std::vector<int64_t> n(l.block_rows(), 0);
  auto m = l.mask();
  for (int64_t r = 0; r < l.block_rows(); ++r)
    for (int64_t c = 0; c < l.block_cols(); ++c) n[r] += m[r * l.block_cols() + c];
  return n;
}

::testing::AssertionResult symmetric_with_diagonal(const BlockLayout& l) {
  if (l.block_rows() != l.block_cols()) return ::testing::AssertionFailure() << "not square: " << l.str();
  for (int64_t i = 0; i < l.block_rows(); ++i) {
    if (!l.has(i, i)) return ::testing::AssertionFailure() << "diagonal block " << i << " missing";
    for (int64_t j = 0; j < l.block_cols(); ++j)
      if (l.has(i, j) != l.has(j, i)) return ::testing::AssertionFailure() << "(" << i << ", " << j << ") not mirrored";
  }
  return ::testing::AssertionSuccess();
}

// Ring lattice: i linked to i±1..i±k/2 (mod n), plus the diagonal.
std::vector<uint8_t> ring_mask(int64_t n, int64_t k) {
  std::vector<uint8_t> m(n * n, 0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = -k / 2; d <= k / 2; ++d) m[i * n + ((i + d) % n + n) % n] = 1;
  return m;
}

// Runs f, expects ErrType, and checks the message contains every string in `parts`.
template <class ErrType>
void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning " << parts[0];
  } catch (const ErrType& e) {
    std::string m = e.what();
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
  }
}

TEST(LayoutGenerators, DenseStoresEveryBlock) {
  for (int64_t bs : kBlockSizes) {
    auto l = dense_layout(3 * bs, 5 * bs, bs);
    EXPECT_EQ(l->block_rows(), 3);
    EXPECT_EQ(l->block_cols(), 5);
    EXPECT_EQ(l->nnz(), 15);
    LayoutStats s = layout_stats(*l);
    EXPECT_EQ(s.density, 1.0);
    EXPECT_EQ(s.fan_in_min, 3);
    EXPECT_EQ(s.fan_out_max, 5);
    EXPECT_EQ(s.mix_factor, 1.0);
  }
}

TEST(LayoutGenerators, RandomHasExactCountAndNoEmptyColumn) {
  for (int64_t bs : kBlockSizes) {
    const int64_t R = 24, Q = 40;
    for (double density : {0.05, 0.3, 0.77}) {
      auto l = random_layout(R * bs, Q * bs, bs, density, /*seed=*/bs);
      EXPECT_EQ(l->block_size(), bs);
      EXPECT_EQ(l->nnz(), std::max<int64_t>(Q, std::llround(density * R * Q))) << density;
      EXPECT_NEAR(l->density(), density, 1.0 / (R * Q) + 1e-12) << density;
      for (int64_t n : col_counts(*l)) EXPECT_GE(n, 1);
    }
    // Below 1/R, one block per column is all that is kept.
    auto sparse = random_layout(R * bs, Q * bs, bs, 0.001, 3);
    EXPECT_EQ(sparse->nnz(), Q);
    for (int64_t n : col_counts(*sparse)) EXPECT_EQ(n, 1);
    EXPECT_EQ(*random_layout(R * bs, Q * bs, bs, 1.0, 3), *dense_layout(R * bs, Q * bs, bs));
  }
}

TEST(LayoutGenerators, RandomIsDeterministicFromSeed) {
  auto a = random_layout(512, 768, 32, 0.25, 11), b = random_layout(512, 768, 32, 0.25, 11);
  auto c = random_layout(512, 768, 32, 0.25, 12);
  EXPECT_EQ(a->mask(), b->mask());
  EXPECT_NE(a->mask(), c->mask());
}

TEST(LayoutGenerators, BarabasiAlbertIsSymmetricWithDiagonal) {
  for (int64_t bs : kBlockSizes) {
    const int64_t n = 40;
    for (int64_t m : {1, 2, 5}) {
      auto l = barabasi_albert_layout(n * bs, n * bs, bs, m, 7);
      EXPECT_TRUE(symmetric_with_diagonal(*l));
      // m edges from node m, then m per later node: m * (n - m) undirected edges.
      EXPECT_EQ(l->nnz(), n + 2 * m * (n - m)) << m;
      auto deg = row_counts(*l);  // includes the diagonal
      for (int64_t v = m; v < n; ++v) EXPECT_GE(deg[v], m + 1) << v;
      for (int64_t v = 0; v < m; ++v) EXPECT_GE(deg[v], 2) << v;
    }
  }
  auto a = barabasi_albert_layout(1024, 1024, 16, 3, 5), b = barabasi_albert_layout(1024, 1024, 16, 3, 5);
  EXPECT_EQ(a->mask(), b->mask());
  EXPECT_NE(a->mask(), barabasi_albert_layout(1024, 1024, 16, 3, 6)->mask());
}

TEST(LayoutGenerators, WattsStrogatzWithoutRewiringIsTheRingLattice) {
  for (int64_t bs : kBlockSizes) {
    const int64_t n = 20;
    for (int64_t k : {2, 4, 10}) {
      auto l = watts_strogatz_layout(n * bs, n * bs, bs, k, 0.0, 99);
      EXPECT_EQ(l->mask(), ring_mask(n, k)) << k;
    }
  }
}

TEST(LayoutGenerators, WattsStrogatzRewiringKeepsEdgeCountAndSymmetry) {
  for (int64_t bs : kBlockSizes) {
    const int64_t n = 36, k = 6;
    for (double p : {0.2, 1.0}) {
      auto l = watts_strogatz_layout(n * bs, n * bs, bs, k, p, 21);
      EXPECT_TRUE(symmetric_with_diagonal(*l));
      EXPECT_EQ(l->nnz(), n * (k + 1)) << p;
      EXPECT_NE(l->mask(), ring_mask(n, k)) << p;
    }
  }
  auto a = watts_strogatz_layout(2048, 2048, 32, 4, 0.3, 1), b = watts_strogatz_layout(2048, 2048, 32, 4, 0.3, 1);
  EXPECT_EQ(a->mask(), b->mask());
  EXPECT_NE(a->mask(), watts_strogatz_layout(2048, 2048, 32, 4, 0.3, 2)->mask());
}

TEST(LayoutGenerators, BalancedHasExactRowAndColumnCounts) {
  struct Case { int64_t R, Q, b, r; };  // r = Q * b / R
  for (int64_t bs : kBlockSizes)
    for (Case cs : {Case{32, 32, 4, 4}, Case{16, 48, 4, 12}, Case{48, 16, 6, 2}, Case{12, 12, 12, 12}}) {
      auto l = balanced_random_layout(cs.R * bs, cs.Q * bs, bs, cs.b, 3);
      EXPECT_EQ(l->nnz(), cs.Q * cs.b);
      for (int64_t n : col_counts(*l)) EXPECT_EQ(n, cs.b);
      for (int64_t n : row_counts(*l)) EXPECT_EQ(n, cs.r);
      LayoutStats s = layout_stats(*l);
      EXPECT_EQ(s.fan_in_min, cs.b);
      EXPECT_EQ(s.fan_in_max, cs.b);
      EXPECT_EQ(s.fan_out_min, cs.r);
      EXPECT_EQ(s.fan_out_max, cs.r);
    }
  auto a = balanced_random_layout(1024, 1024, 32, 3, 8), b = balanced_random_layout(1024, 1024, 32, 3, 8);
  EXPECT_EQ(a->mask(), b->mask());
  EXPECT_NE(a->mask(), balanced_random_layout(1024, 1024, 32, 3, 9)->mask());
}

TEST(LayoutGenerators, MaskLayoutMatchesFromMask) {
  std::vector<uint8_t> mask = {1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 1, 1};  // 3 x 4
  for (int64_t bs : kBlockSizes) {
    auto l = mask_layout(3 * bs, 4 * bs, bs, mask);
    EXPECT_EQ(*l, *BlockLayout::from_mask(3 * bs, 4 * bs, bs, mask));
    EXPECT_EQ(l->mask(), mask);
  }
}

TEST(LayoutStats, FanCountsMatchRecount) {
  for (int64_t bs : kBlockSizes) {
    auto l = random_layout(20 * bs, 13 * bs, bs, 0.2, 40 + bs);
    LayoutStats s = layout_stats(*l);
    auto fin = col_counts(*l), fout = row_counts(*l);
    EXPECT_EQ(s.fan_in_min, *std::min_element(fin.begin(), fin.end()));
    EXPECT_EQ(s.fan_in_max, *std::max_element(fin.begin(), fin.end()));
    EXPECT_EQ(s.fan_out_min, *std::min_element(fout.begin(), fout.end()));
    EXPECT_EQ(s.fan_out_max, *std::max_element(fout.begin(), fout.end()));
    EXPECT_DOUBLE_EQ(s.fan_in_mean, static_cast<double>(l->nnz()) / 13);
    EXPECT_DOUBLE_EQ(s.fan_out_mean, static_cast<double>(l->nnz()) / 20);
    EXPECT_EQ(s.empty_cols, 0);
    EXPECT_EQ(s.empty_rows, std::count(fout.begin(), fout.end(), 0));
    EXPECT_DOUBLE_EQ(s.density, l->density());
  }
  // Hand-made: 3 x 4 mask with row 1 and column 2 empty.
  auto l = mask_layout(24, 32, 8, {1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1});
  LayoutStats s = layout_stats(*l);
  EXPECT_EQ(s.empty_rows, 1);
  EXPECT_EQ(s.empty_cols, 1);
  EXPECT_EQ(s.fan_in_min, 0);
  EXPECT_EQ(s.fan_in_max, 2);
  EXPECT_EQ(s.fan_out_min, 0);
  EXPECT_EQ(s.fan_out_max, 2);
}

TEST(LayoutStats, MixFactorOnKnownLayouts) {
  // Square: density of M·M. A chain 0 -> 1 -> 2 reaches only (0, 2) in two hops.
  EXPECT_DOUBLE_EQ(layout_stats(*mask_layout(24, 24, 8, {0, 1, 0, 0, 0, 1, 0, 0, 0})).mix_factor, 1.0 / 9);
  // Identity: M·M = I.
  std::vector<uint8_t> eye(100 * 100, 0);
  for (int i = 0; i < 100; ++i) eye[i * 100 + i] = 1;
  EXPECT_DOUBLE_EQ(layout_stats(*mask_layout(800, 800, 8, eye)).mix_factor, 0.01);
  // Ring with diagonal, k = 2 on 100 nodes (crosses 64-bit words): M·M covers i-2..i+2.
  EXPECT_DOUBLE_EQ(layout_stats(*watts_strogatz_layout(800, 800, 8, 2, 0.0, 0)).mix_factor, 5.0 / 100);
  // Non-square: density of M·Mᵀ·M. Rows sharing no column: M·Mᵀ = I, so it is M's density.
  EXPECT_DOUBLE_EQ(layout_stats(*mask_layout(16, 24, 8, {1, 0, 0, 0, 1, 1})).mix_factor, 0.5);
  // Rows sharing column 1: every row reaches every column.
  EXPECT_DOUBLE_EQ(layout_stats(*mask_layout(16, 24, 8, {1, 1, 0, 0, 1, 1})).mix_factor, 1.0);
  // Random graphs mix faster than the ring with the same number of edges.
  const double ring = layout_stats(*watts_strogatz_layout(2048, 2048, 16, 4, 0.0, 1)).mix_factor;
  const double small_world = layout_stats(*watts_strogatz_layout(2048, 2048, 16, 4, 0.5, 1)).mix_factor;
  EXPECT_GT(small_world, ring);
}

TEST(LayoutStats, String) {
  EXPECT_EQ(layout_stats_str(layout_stats(*dense_layout(16, 16, 8))),
            "density 1.000, fan-in 2..2 (mean 2.00), fan-out 2..2 (mean 2.00), empty rows 0, empty cols 0, mix 1.000");
}

TEST(LayoutGenerators, ErrorsNameTheGeneratorAndValue) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_error<ValueError>([] { dense_layout(48, 48, 12); }, {"dense_layout", "12"});
  expect_error<ShapeError>([] { dense_layout(40, 64, 16); }, {"dense_layout", "40"});
  expect_error<ShapeError>([] { random_layout(64, 0, 16, 0.5, 0); }, {"random_layout", "output features 0"});
  expect_error<ValueError>([] { random_layout(64, 64, 16, 0.0, 0); }, {"random_layout", "density 0"});
  expect_error<ValueError>([] { random_layout(64, 64, 16, 1.5, 0); }, {"random_layout", "1.5"});
  expect_error<ValueError>([&] { random_layout(64, 64, 16, nan, 0); }, {"random_layout", "nan"});
  expect_error<ShapeError>([] { barabasi_albert_layout(64, 128, 16, 1, 0); }, {"barabasi_albert_layout", "square"});
  expect_error<ValueError>([] { barabasi_albert_layout(128, 128, 16, 0, 0); }, {"barabasi_albert_layout", "m = 0"});
  expect_error<ValueError>([] { barabasi_albert_layout(128, 128, 16, 8, 0); }, {"barabasi_albert_layout", "m = 8"});
  expect_error<ShapeError>([] { watts_strogatz_layout(128, 64, 16, 2, 0.1, 0); }, {"watts_strogatz_layout", "square"});
  expect_error<ValueError>([] { watts_strogatz_layout(128, 128, 16, 3, 0.1, 0); }, {"watts_strogatz_layout", "k = 3"});
  expect_error<ValueError>([] { watts_strogatz_layout(128, 128, 16, 8, 0.1, 0); }, {"watts_strogatz_layout", "k = 8"});
  expect_error<ValueError>([] { watts_strogatz_layout(128, 128, 16, 0, 0.1, 0); }, {"watts_strogatz_layout", "k = 0"});
  expect_error<ValueError>([] { watts_strogatz_layout(128, 128, 16, 2, -0.1, 0); }, {"watts_strogatz_layout", "-0.1"});
  expect_error<ValueError>([] { watts_strogatz_layout(128, 128, 16, 2, 1.5, 0); }, {"watts_strogatz_layout", "1.5"});
  expect_error<ValueError>([] { balanced_random_layout(128, 128, 16, 0, 0); }, {"balanced_random_layout", "= 0"});
  expect_error<ValueError>([] { balanced_random_layout(128, 128, 16, 9, 0); }, {"balanced_random_layout", "= 9"});
  // 3 block columns x 2 blocks = 6 do not split evenly over 4 block rows.
  expect_error<ValueError>([] { balanced_random_layout(64, 48, 16, 2, 0); },
                           {"balanced_random_layout", "6", "4 block rows"});
  expect_error<ShapeError>([] { mask_layout(32, 32, 16, {1, 1, 1}); }, {"mask_layout", "3 entries", "2x2"});
  expect_error<ValueError>([] { mask_layout(32, 32, 16, {0, 0, 0, 0}); }, {"stores no block"});
}

}  // namespace
}  // namespace tessera
