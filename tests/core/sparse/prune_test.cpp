#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/random.h"
#include "core/sparse/generators.h"
#include "core/sparse/prune.h"

namespace tessera {
namespace {

const int64_t kBlockSizes[] = {8, 16, 32, 64};

// Five blocks of a 3 x 3 grid (bs 8) with known norms:
//   k  entries                l2    max_abs
//   0  one 1.0                1     1
//   1  one -3.0               3     3
//   2  four ±2.0              4     2
//   3  sixty-four 0.5         4     0.5    (l2 ties with block 2: block 2 wins)
//   4  one 2.5                2.5   2.5
const std::vector<uint8_t> kMask = {1, 0, 1, 0, 1, 0, 1, 0, 1};

template <class T>
Tensor known_weights(DType dtype) {
  std::vector<T> w(5 * 64, T(0));
  w[0 * 64 + 9] = T(1.0);
  w[1 * 64 + 20] = T(-3.0);
  w[2 * 64 + 0] = T(2.0);
  w[2 * 64 + 7] = T(-2.0);
  w[2 * 64 + 33] = T(2.0);
  w[2 * 64 + 63] = T(-2.0);
  for (int i = 0; i < 64; ++i) w[3 * 64 + i] = T(0.5);
  w[4 * 64 + 50] = T(2.5);
  return from_vector<T>(w, {5, 8, 8}, dtype);
}

std::vector<double> block_values(const Tensor& w, int64_t k) {
  auto all = w.to_vector<double>();
  const int64_t bb = w.size(1) * w.size(2);
  return {all.begin() + k * bb, all.begin() + (k + 1) * bb};
}

// The pruned result is a subset of `old` with kept blocks in place and their weights copied.
void expect_consistent(const BlockLayout& old, const Tensor& w, const PruneResult& p) {
  ASSERT_EQ(p.layout->nnz(), static_cast<int64_t>(p.kept.size()));
  EXPECT_TRUE(std::is_sorted(p.kept.begin(), p.kept.end()));
  EXPECT_EQ(p.weights.shape(), Shape({p.layout->nnz(), old.block_size(), old.block_size()}));
  EXPECT_EQ(p.weights.dtype(), w.dtype());
  EXPECT_FALSE(p.weights.requires_grad());
  for (int64_t j = 0; j < p.layout->nnz(); ++j) {
    EXPECT_EQ(p.layout->block_row()[j], old.block_row()[p.kept[j]]) << j;
    EXPECT_EQ(p.layout->block_col()[j], old.block_col()[p.kept[j]]) << j;
    EXPECT_EQ(block_values(p.weights, j), block_values(w, p.kept[j])) << j;
  }
}

TEST(PruneBlocks, KeepsLargestL2Blocks) {
  auto layout = mask_layout(24, 24, 8, kMask);
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor w = dt == DType::f32 ? known_weights<float>(dt) : known_weights<double>(dt);
    PruneResult p3 = prune_blocks(*layout, w, 3);  // l2 by default
    EXPECT_EQ(p3.kept, (std::vector<int64_t>{1, 2, 3}));
    expect_consistent(*layout, w, p3);
    EXPECT_EQ(p3.layout->mask(), (std::vector<uint8_t>{0, 0, 1, 0, 1, 0, 1, 0, 0}));
    EXPECT_EQ(prune_blocks(*layout, w, 2, BlockNorm::l2).kept, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(prune_blocks(*layout, w, 1, BlockNorm::l2).kept, (std::vector<int64_t>{2}));  // tie: lower k
    EXPECT_EQ(prune_blocks(*layout, w, 4, BlockNorm::l2).kept, (std::vector<int64_t>{1, 2, 3, 4}));
  }
}

TEST(PruneBlocks, KeepsLargestMaxAbsBlocks) {
  auto layout = mask_layout(24, 24, 8, kMask);
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor w = dt == DType::f32 ? known_weights<float>(dt) : known_weights<double>(dt);
    PruneResult p = prune_blocks(*layout, w, 2, BlockNorm::max_abs);
    EXPECT_EQ(p.kept, (std::vector<int64_t>{1, 4}));
    expect_consistent(*layout, w, p);
    EXPECT_EQ(prune_blocks(*layout, w, 3, BlockNorm::max_abs).kept, (std::vector<int64_t>{1, 2, 4}));
    EXPECT_EQ(prune_blocks(*layout, w, 4, BlockNorm::max_abs).kept, (std::vector<int64_t>{0, 1, 2, 4}));
  }
}

TEST(PruneBlocks, RandomLayoutsKeepTheTopNorms) {
  for (int64_t bs : kBlockSizes) {
    auto layout = random_layout(12 * bs, 10 * bs, bs, 0.3, bs);
    Generator gen(bs);
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor w = normal({layout->nnz(), bs, bs}, 0.0, 1.0, gen, dt);
      for (BlockNorm norm : {BlockNorm::l2, BlockNorm::max_abs}) {
        const int64_t keep = layout->nnz() / 3;
        PruneResult p = prune_blocks(*layout, w, keep, norm);
        ASSERT_EQ(p.layout->nnz(), keep);
        expect_consistent(*layout, w, p);
        // Every kept block's norm >= every dropped block's norm.
        std::vector<double> score(layout->nnz());
        for (int64_t k = 0; k < layout->nnz(); ++k) {
          double acc = 0;
          for (double v : block_values(w, k)) acc = norm == BlockNorm::l2 ? acc + v * v : std::max(acc, std::abs(v));
          score[k] = acc;
        }
        double kept_min = 1e300, dropped_max = -1;
        for (int64_t k = 0; k < layout->nnz(); ++k) {
          if (std::binary_search(p.kept.begin(), p.kept.end(), k))
            kept_min = std::min(kept_min, score[k]);
          else
            dropped_max = std::max(dropped_max, score[k]);
        }
        EXPECT_GE(kept_min, dropped_max) << bs;
      }
    }
  }
}

TEST(PruneBlocks, KeepAllIsIdentity) {
  for (int64_t bs : kBlockSizes) {
    auto layout = barabasi_albert_layout(8 * bs, 8 * bs, bs, 2, 1);
    Generator gen(3);
    Tensor w = normal({layout->nnz(), bs, bs}, 0.0, 1.0, gen);
    PruneResult p = prune_blocks(*layout, w, layout->nnz());
    EXPECT_EQ(*p.layout, *layout);
    EXPECT_EQ(p.weights.to_vector<float>(), w.to_vector<float>());
    std::vector<int64_t> all(layout->nnz());
    for (int64_t k = 0; k < layout->nnz(); ++k) all[k] = k;
    EXPECT_EQ(p.kept, all);
    EXPECT_FALSE(p.weights.same(w));
    EXPECT_EQ(*prune_blocks_fraction(*layout, w, 1.0).layout, *layout);
  }
}

TEST(PruneBlocks, FractionRoundsToBlocks) {
  auto layout = mask_layout(24, 24, 8, kMask);
  Tensor w = known_weights<float>(DType::f32);
  EXPECT_EQ(prune_blocks_fraction(*layout, w, 0.5).kept, (std::vector<int64_t>{1, 2, 3}));  // round(2.5) = 3
  EXPECT_EQ(prune_blocks_fraction(*layout, w, 0.4, BlockNorm::max_abs).kept, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(prune_blocks_fraction(*layout, w, 0.01).kept, (std::vector<int64_t>{2}));  // at least one block
}

TEST(PruneBlocks, NanBlocksRankLowest) {
  auto layout = mask_layout(24, 24, 8, kMask);
  Tensor w = known_weights<double>(DType::f64);
  w.data<double>()[1 * 64 + 5] = std::numeric_limits<double>::quiet_NaN();  // block 1 (largest max_abs)
  EXPECT_EQ(prune_blocks(*layout, w, 2, BlockNorm::max_abs).kept, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(prune_blocks(*layout, w, 4, BlockNorm::l2).kept, (std::vector<int64_t>{0, 2, 3, 4}));
}

TEST(PruneBlocks, Errors) {
  auto layout = mask_layout(24, 24, 8, kMask);
  Tensor w = known_weights<float>(DType::f32);
  try {
    prune_blocks(*layout, zeros({4, 8, 8}), 2);
    ADD_FAILURE() << "no ShapeError";
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("prune_blocks"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 8, 8]"), std::string::npos) << m;
    EXPECT_NE(m.find("[5, 8, 8]"), std::string::npos) << m;
  }
  EXPECT_THROW(prune_blocks(*layout, zeros({5, 16, 16}), 2), ShapeError);
  EXPECT_THROW(prune_blocks(*layout, zeros({5, 64}), 2), ShapeError);
  EXPECT_THROW(prune_blocks(*layout, zeros({5, 8, 8}, DType::i32), 2), DTypeError);
  EXPECT_THROW(prune_blocks(*layout, Tensor(), 2), ValueError);
  try {
    prune_blocks(*layout, w, 0);
    ADD_FAILURE() << "no ValueError";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("prune_blocks: keep = 0"), std::string::npos) << m;
  }
  EXPECT_THROW(prune_blocks(*layout, w, 6), ValueError);
  EXPECT_THROW(prune_blocks_fraction(*layout, w, 0.0), ValueError);
  EXPECT_THROW(prune_blocks_fraction(*layout, w, 1.5), ValueError);
}

}  // namespace
}  // namespace tessera
