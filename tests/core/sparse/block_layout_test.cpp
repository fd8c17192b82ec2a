#include <gtest/gtest.h>

#include "core/error.h"
#include "core/sparse/block_layout.h"
#include "gradcheck.h"

namespace tessera {
namespace {

TEST(BlockLayout, TablesFromAMask) {
  // 3 block rows x 4 block columns, bs 8 (C = 24, K = 32):
  //   r0: c1 c3      r1: (empty)      r2: c0 c1
  auto l = BlockLayout::from_mask(24, 32, 8, {0, 1, 0, 1, /**/ 0, 0, 0, 0, /**/ 1, 1, 0, 0});
  EXPECT_EQ(l->nnz(), 4);
  EXPECT_EQ(l->block_rows(), 3);
  EXPECT_EQ(l->block_cols(), 4);
  EXPECT_DOUBLE_EQ(l->density(), 4.0 / 12.0);
  // Storage order is row-major: k = 0:(0,1) 1:(0,3) 2:(2,0) 3:(2,1).
  EXPECT_EQ(l->block_row(), (std::vector<int32_t>{0, 0, 2, 2}));
  EXPECT_EQ(l->block_col(), (std::vector<int32_t>{1, 3, 0, 1}));
  EXPECT_EQ(l->row_ptr(), (std::vector<int32_t>{0, 2, 2, 4}));
  // Forward table by output column: c0 {2}, c1 {0, 3}, c2 {}, c3 {1}.
  EXPECT_EQ(l->col_ptr(), (std::vector<int32_t>{0, 1, 3, 3, 4}));
  EXPECT_EQ(l->col_blocks(), (std::vector<int32_t>{2, 0, 3, 1}));
  EXPECT_EQ(l->block_index(2, 1), 3);
  EXPECT_EQ(l->block_index(1, 1), -1);
  EXPECT_FALSE(l->has(0, 0));
  EXPECT_EQ(l->mask(), (std::vector<uint8_t>{0, 1, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0}));
  EXPECT_NE(l->str().find("4/12 blocks"), std::string::npos) << l->str();
  EXPECT_TRUE(*l == *BlockLayout::from_mask(24, 32, 8, l->mask()));
}

TEST(BlockLayout, DensityOfAllBlocksAndEveryBlockStored) {
  auto part = BlockLayout::from_mask(16, 24, 8, {1, 0, 1, /**/ 0, 1, 0});
  EXPECT_EQ(part->grid_blocks(), 6);
  EXPECT_DOUBLE_EQ(part->density(), 0.5);
  EXPECT_FALSE(part->stores_every_block());
  auto full = BlockLayout::from_mask(16, 24, 8, std::vector<uint8_t>(6, 1));
  EXPECT_EQ(full->nnz(), full->grid_blocks());
  EXPECT_DOUBLE_EQ(full->density(), 1.0);
  EXPECT_TRUE(full->stores_every_block());
}

TEST(BlockLayout, Errors) {
  testing::expect_error<ValueError>([] { BlockLayout::from_mask(24, 24, 12, std::vector<uint8_t>(4, 1)); },
                                    {"block size 12"});
  testing::expect_error<ShapeError>([] { BlockLayout::from_mask(20, 32, 8, std::vector<uint8_t>(8, 1)); },
                                    {"input features 20", "8"});
  testing::expect_error<ShapeError>([] { BlockLayout::from_mask(16, 36, 8, std::vector<uint8_t>(8, 1)); },
                                    {"output features 36"});
  testing::expect_error<ShapeError>([] { BlockLayout::from_mask(16, 32, 8, std::vector<uint8_t>(7, 1)); },
                                    {"7 entries", "2x4"});
  testing::expect_error<ValueError>([] { BlockLayout::from_mask(16, 32, 8, std::vector<uint8_t>(8, 0)); },
                                    {"no block"});
}

}  // namespace
}  // namespace tessera
