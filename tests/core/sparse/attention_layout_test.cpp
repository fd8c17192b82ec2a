// AttentionLayout: generators against hand-written block masks, look-up tables, errors.
#include "core/sparse/attention_layout.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gradcheck.h"

namespace tessera {
namespace {

using testing::expect_error;

// A block mask from rows of '1'/'.' characters (row i = query block i).
std::vector<uint8_t> mask_of(const std::vector<std::string>& rows) {
  std::vector<uint8_t> m;
  for (const std::string& r : rows)
    for (char ch : r) m.push_back(ch == '1' ? 1 : 0);
  return m;
}

TEST(AttentionLayout, DenseCausalTables) {
  auto l = AttentionLayout::dense_causal(/*T=*/48, /*bs=*/16, /*heads=*/2);
  EXPECT_EQ(l->blocks(), 3);
  EXPECT_EQ(l->seq_len(), 48);
  EXPECT_EQ(l->heads(), 2);
  EXPECT_EQ(l->nnz(), 12);
  EXPECT_EQ(l->nnz(1), 6);
  EXPECT_DOUBLE_EQ(l->density(), 1.0);
  EXPECT_EQ(l->mask(1), mask_of({"1..", "11.", "111"}));
  // Rows (h, i): key blocks increasing; columns (h, j): query blocks increasing.
  EXPECT_EQ(l->row_ptr(), (std::vector<int32_t>{0, 1, 3, 6, 7, 9, 12}));
  EXPECT_EQ(l->key_blocks(), (std::vector<int32_t>{0, 0, 1, 0, 1, 2, 0, 0, 1, 0, 1, 2}));
  EXPECT_EQ(l->col_ptr(), (std::vector<int32_t>{0, 3, 5, 6, 9, 11, 12}));
  EXPECT_EQ(l->query_blocks(), (std::vector<int32_t>{0, 1, 2, 1, 2, 2, 0, 1, 2, 1, 2, 2}));
  EXPECT_TRUE(l->has(1, 2, 0));
  EXPECT_FALSE(l->has(1, 0, 2));
  EXPECT_FALSE(l->has(2, 0, 0));
  EXPECT_EQ(
      l->str(),
      "AttentionLayout(dense_causal, T=48, bs=16, heads=2, 3x3 blocks, 12/12 causal blocks, density 1.000)");
}

TEST(AttentionLayout, LocalWindow) {
  auto l = AttentionLayout::local_window(40, 8, 1, /*window_blocks=*/2);
  EXPECT_EQ(l->mask(0), mask_of({"1....", "11...", ".11..", "..11.", "...11"}));
  EXPECT_NEAR(l->density(), 9.0 / 15.0, 1e-15);
  EXPECT_EQ(l->kind(), "local_window(window_blocks=2)");
  // A window of one block: the diagonal only; a window past the start: dense causal.
  EXPECT_EQ(l->nnz(), 9);
  EXPECT_EQ(AttentionLayout::local_window(40, 8, 1, 1)->nnz(), 5);
  EXPECT_TRUE(*AttentionLayout::local_window(40, 8, 3, 9) == *AttentionLayout::dense_causal(40, 8, 3));
}

TEST(AttentionLayout, StridedMergesLocalAndStrideComponents) {
  // s = 3: local i − 3 < j <= i, plus (i − j) mod 3 == 0; every head the same.
  auto l = AttentionLayout::strided(7 * 16, 16, 2, /*stride_blocks=*/3);
  const std::vector<uint8_t> expected = mask_of({
      "1......",  //
      "11.....",  //
      "111....",  //
      "1111...",  // j = 0 by the stride
      ".1111..",  // j = 1 by the stride
      "..1111.",  // j = 2 by the stride
      "1..1111",  // j = 0 and 3 by the stride
  });
  EXPECT_EQ(l->mask(0), expected);
  EXPECT_EQ(l->mask(1), expected);
  EXPECT_EQ(l->kind(), "strided(stride_blocks=3)");
  // Stride 1: every block.
  EXPECT_TRUE(*AttentionLayout::strided(64, 8, 2, 1) == *AttentionLayout::dense_causal(64, 8, 2));
}

TEST(AttentionLayout, FixedLocalWindowsAndPerHeadSummaries) {
  // s = 3, c = 1: local = own stride window {0,1,2}, {3,4,5}, {6}; summary sub-block per head:
  // head 0: j mod 3 == 2, head 1: j mod 3 == 1, head 2: j mod 3 == 0, head 3 = head 0.
  auto l = AttentionLayout::fixed(7 * 8, 8, 4, /*stride_blocks=*/3, /*summary_blocks=*/1);
  EXPECT_EQ(l->mask(0), mask_of({"1......", "11.....", "111....", "..11...", "..111..", "..1111.", "..1..11"}));
  EXPECT_EQ(l->mask(1), mask_of({"1......", "11.....", "111....", ".1.1...", ".1.11..", ".1.111.", ".1..1.1"}));
  EXPECT_EQ(l->mask(2), mask_of({"1......", "11.....", "111....", "1..1...", "1..11..", "1..111.", "1..1..1"}));
  EXPECT_EQ(l->mask(3), l->mask(0));
  EXPECT_EQ(l->kind(), "fixed(stride_blocks=3, summary_blocks=1)");
  // s = 4, c = 2: two summary positions, {2, 3} (head 0) and {0, 1} (head 1).
  auto l2 = AttentionLayout::fixed(6 * 8, 8, 2, 4, 2);
  EXPECT_EQ(l2->mask(0), mask_of({"1.....", "11....", "111...", "1111..", "..111.", "..1111"}));
  EXPECT_EQ(l2->mask(1), mask_of({"1.....", "11....", "111...", "1111..", "11..1.", "11..11"}));
  // c == s: every block is a summary block.
  EXPECT_TRUE(*AttentionLayout::fixed(64, 8, 2, 3, 3) == *AttentionLayout::dense_causal(64, 8, 2));
}

TEST(AttentionLayout, FromMasksRoundTrip) {
  const std::vector<std::vector<uint8_t>> masks{mask_of({"1..", "11.", "1.1"}), mask_of({"1..", ".1.", ".11"})};
  auto l = AttentionLayout::from_masks(96, 32, masks);
  EXPECT_EQ(l->heads(), 2);
  EXPECT_EQ(l->mask(0), masks[0]);
  EXPECT_EQ(l->mask(1), masks[1]);
  EXPECT_EQ(l->nnz(0), 5);
  EXPECT_EQ(l->nnz(1), 4);
  EXPECT_TRUE(l->has(0, 2, 0));
  EXPECT_FALSE(l->has(0, 2, 1));
  EXPECT_EQ(l->key_blocks(), (std::vector<int32_t>{0, 0, 1, 0, 2, 0, 1, 1, 2}));
  EXPECT_EQ(l->query_blocks(), (std::vector<int32_t>{0, 1, 2, 1, 2, 0, 1, 2, 2}));
  EXPECT_NEAR(l->density(), 9.0 / 12.0, 1e-15);
  EXPECT_NE(l->str().find("from_masks, T=96, bs=32, heads=2, 3x3 blocks, 9/12 causal blocks, density 0.750"),
            std::string::npos)
      << l->str();
}

TEST(AttentionLayout, Blocks128RefineIntoTheSameTokenPatternIn64Blocks) {
  // Every token pair (t, s): kept by the 128-block layout iff kept by its 64-block refinement.
  const std::vector<uint8_t> m = mask_of({"1...", "11..", ".11.", "1.11"});
  for (const AttentionLayoutPtr& l : {AttentionLayout::from_masks(512, 128, {m, mask_of({"1...", ".1..", "..1.", "...1"})}),
                                      AttentionLayout::strided(512, 128, 2, 2), AttentionLayout::dense_causal(256, 128, 1)}) {
    ASSERT_NE(l->refined64(), nullptr) << l->str();
    const AttentionLayout& f = *l->refined64();
    EXPECT_EQ(f.block_size(), 64);
    EXPECT_EQ(f.blocks(), 2 * l->blocks());
    EXPECT_EQ(f.heads(), l->heads());
    for (int64_t h = 0; h < l->heads(); ++h)
      for (int64_t t = 0; t < l->seq_len(); t += 32)
        for (int64_t s = 0; s <= t; s += 32)
          EXPECT_EQ(l->has(h, t / 128, s / 128), f.has(h, t / 64, s / 64)) << l->str() << " h " << h << " t " << t << " s " << s;
  }
  EXPECT_EQ(AttentionLayout::dense_causal(256, 64, 1)->refined64(), nullptr) << "only 128-blocks are refined";
}

TEST(AttentionLayout, DensityCountsCausalBlocksAndDegenerateKindsKeepThemAll) {
  // T = 64, bs = 16: nb = 4, 10 causal blocks per head (the lower triangle with the diagonal).
  auto dense = AttentionLayout::dense_causal(64, 16, 3);
  EXPECT_EQ(dense->causal_blocks(), 30);
  EXPECT_TRUE(dense->keeps_every_causal_block());
  auto strided = AttentionLayout::strided(64, 16, 3, /*stride_blocks=*/2);
  EXPECT_EQ(strided->causal_blocks(), 30);
  EXPECT_EQ(strided->nnz(), 3 * 9);  // per head: 4 diagonal, 3 neighbours, (2, 0) and (3, 1)
  EXPECT_NEAR(strided->density(), 27.0 / 30.0, 1e-15);
  EXPECT_FALSE(strided->keeps_every_causal_block());
  // Sparse kinds that keep every causal block: one block per sequence (T = bs), a stride or a
  // window reaching back past the start, fixed with summary == stride.
  for (const AttentionLayoutPtr& l :
       {AttentionLayout::strided(32, 32, 4, 2), AttentionLayout::strided(64, 16, 1, 4),
        AttentionLayout::local_window(64, 16, 2, 4), AttentionLayout::fixed(64, 16, 2, 2, 2)}) {
    EXPECT_TRUE(l->keeps_every_causal_block()) << l->str();
    EXPECT_DOUBLE_EQ(l->density(), 1.0) << l->str();
    EXPECT_TRUE(*l == *AttentionLayout::dense_causal(l->seq_len(), l->block_size(), l->heads())) << l->str();
  }
}

TEST(AttentionLayout, Errors) {
  expect_error<ValueError>([] { AttentionLayout::dense_causal(48, 12, 1); }, {"dense_causal", "bs=12"});
  expect_error<ValueError>([] { AttentionLayout::dense_causal(512, 256, 1); }, {"dense_causal", "bs=256", "128"});
  expect_error<ShapeError>([] { AttentionLayout::local_window(20, 8, 1, 2); },
                           {"local_window", "T=20", "bs=8"});
  expect_error<ShapeError>([] { AttentionLayout::strided(0, 8, 1, 2); }, {"strided", "T=0"});
  expect_error<ValueError>([] { AttentionLayout::fixed(64, 8, 0, 2, 1); }, {"fixed", "heads", "0"});
  expect_error<ValueError>([] { AttentionLayout::local_window(64, 8, 2, 0); },
                           {"local_window", "window_blocks", "0"});
  expect_error<ValueError>([] { AttentionLayout::strided(64, 8, 2, 0); }, {"strided", "stride_blocks", "0"});
  expect_error<ValueError>([] { AttentionLayout::fixed(64, 8, 2, 0, 1); }, {"fixed", "stride_blocks"});
  expect_error<ValueError>([] { AttentionLayout::fixed(64, 8, 2, 2, 3); }, {"fixed", "summary_blocks", "3"});
  expect_error<ValueError>([] { AttentionLayout::fixed(64, 8, 2, 2, 0); }, {"fixed", "summary_blocks", "0"});
  expect_error<ValueError>([] { AttentionLayout::from_masks(64, 8, {}); }, {"from_masks", "no masks"});
  const std::vector<uint8_t> good = mask_of({"1..", "11.", "111"});
  expect_error<ValueError>(
      [&] {
        AttentionLayout::from_masks(24, 8, {good, mask_of({"1.1", "11.", "111"})});
      },
      {"from_masks", "head 1", "query 0", "key 2", "above the diagonal"});
  expect_error<ValueError>(
      [&] {
        AttentionLayout::from_masks(24, 8, {mask_of({"1..", "1..", "111"})});
      },
      {"from_masks", "head 0", "query block 1", "diagonal"});
  expect_error<ShapeError>([&] { AttentionLayout::from_masks(32, 8, {good}); },
                           {"from_masks", "9 entries", "T=32"});
  expect_error<ValueError>([] { AttentionLayout::dense_causal(64, 8, 1)->mask(1); }, {"mask", "head 1"});
}

}  // namespace
}  // namespace tessera
