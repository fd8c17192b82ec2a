// pack_recurrence_items: how the persistent LSTM recurrence deals groups of hidden units (and
// the parts of groups too large for one block) out to thread blocks: near-equal parts, parts
// alone in their blocks, the lightest whole groups merged when blocks run out, every chunk dealt
// once; on the Barabási–Albert layout that trains (seed 1001) the busiest block drops from 51
// chunks to 16; the balanced packing (the fewest chunks in the busiest block) to 12 forward and
// 48 backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/sparse/generators.h"
#include "kernels/common/recurrence_items.h"
#include "layers/lstm.h"

namespace tessera {
namespace {

using Items = std::vector<RecurrenceItem>;

// Every group's chunks [0, c) dealt exactly once, in parts 0 .. parts-1 in order; a part of a
// split group alone in its block; block loads and group counts as reported.
void expect_consistent(const RecurrencePacking& p, const std::vector<int>& chunks, int max_part, int max_blocks,
                       int max_groups_per_block) {
  EXPECT_LE(static_cast<int>(p.blocks.size()), max_blocks);
  std::map<int, Items> by_group;
  int max_chunks = 0, max_groups = 0;
  for (const Items& b : p.blocks) {
    ASSERT_FALSE(b.empty());
    int load = 0;
    for (const RecurrenceItem& it : b) {
      load += it.end - it.begin;
      by_group[it.group].push_back(it);
      if (it.parts > 1) {
        EXPECT_EQ(b.size(), 1u) << "a part of group " << it.group << " shares its block";
        EXPECT_LE(it.end - it.begin, max_part);
      }
    }
    max_chunks = std::max(max_chunks, load);
    max_groups = std::max(max_groups, static_cast<int>(b.size()));
  }
  EXPECT_EQ(p.max_chunks, max_chunks);
  EXPECT_EQ(p.max_groups, max_groups);
  EXPECT_LE(max_groups, max_groups_per_block);
  ASSERT_EQ(by_group.size(), chunks.size());
  for (auto& [g, items] : by_group) {
    std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.part < b.part; });
    int next = 0;
    for (size_t k = 0; k < items.size(); ++k) {
      EXPECT_EQ(items[k].part, static_cast<int>(k)) << "group " << g;
      EXPECT_EQ(items[k].parts, static_cast<int>(items.size())) << "group " << g;
      EXPECT_EQ(items[k].begin, next) << "group " << g;
      next = items[k].end;
    }
    EXPECT_EQ(next, chunks[static_cast<size_t>(g)]) << "group " << g;
  }
}

TEST(RecurrenceItems, GroupsThatFitTakeABlockEach) {
  const std::optional<RecurrencePacking> p = pack_recurrence_items({3, 0, 5}, 16, 8, 4);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->blocks, (std::vector<Items>{{{0, 0, 3, 0, 1}}, {{1, 0, 0, 0, 1}}, {{2, 0, 5, 0, 1}}}));
  EXPECT_EQ(p->max_chunks, 5);
  EXPECT_EQ(p->split_groups, 0);
}

TEST(RecurrenceItems, LargeGroupsSplitIntoNearEqualParts) {
  const std::optional<RecurrencePacking> p = pack_recurrence_items({10, 51}, 16, 8, 4);
  ASSERT_TRUE(p);
  // 51 chunks: 4 parts of 13, 13, 13, 12
  EXPECT_EQ(p->blocks, (std::vector<Items>{{{0, 0, 10, 0, 1}},
                                            {{1, 0, 13, 0, 4}},
                                            {{1, 13, 26, 1, 4}},
                                            {{1, 26, 39, 2, 4}},
                                            {{1, 39, 51, 3, 4}}}));
  EXPECT_EQ(p->max_chunks, 13);
  EXPECT_EQ(p->split_groups, 1);
}

TEST(RecurrenceItems, TheLightestWholeGroupsShareBlocksWhenBlocksRunOut) {
  // 40 chunks -> parts 14, 13, 13; 7 blocks for 5: groups 1 + 2 (3 chunks), then + 4 (6 chunks)
  const std::vector<int> chunks{5, 1, 2, 40, 3};
  const std::optional<RecurrencePacking> p = pack_recurrence_items(chunks, 16, 5, 4);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->blocks, (std::vector<Items>{{{0, 0, 5, 0, 1}},
                                            {{1, 0, 1, 0, 1}, {2, 0, 2, 0, 1}, {4, 0, 3, 0, 1}},
                                            {{3, 0, 14, 0, 3}},
                                            {{3, 14, 27, 1, 3}},
                                            {{3, 27, 40, 2, 3}}}));
  EXPECT_EQ(p->max_chunks, 14);
  EXPECT_EQ(p->max_groups, 3);
  expect_consistent(*p, chunks, 16, 5, 4);
}

TEST(RecurrenceItems, TheTrainedBarabasiAlbertLayoutFits) {
  // The recurrent layout of train_lstm --layout ba --hidden 4096 --block 32 at seed 1 (layout seed
  // 1001): a 32-unit group's forward K is its per-gate block column. Its busiest holds 51 blocks
  // (408 KB of W_h in bf16, past the 227 KB of one block); split into parts of at most 16 over
  // the H100's 132 SMs, no block holds more than 16.
  const LayoutPtr l = barabasi_albert_layout(4096, 4096, 32, 4, 1001);
  std::vector<int> chunks;
  for (int64_t c = 0; c < l->block_cols(); ++c) chunks.push_back(l->col_ptr()[c + 1] - l->col_ptr()[c]);
  ASSERT_EQ(*std::max_element(chunks.begin(), chunks.end()), 51);
  std::string why;
  const std::optional<RecurrencePacking> p = pack_recurrence_items(chunks, 16, 132, 4, &why);
  ASSERT_TRUE(p) << why;
  expect_consistent(*p, chunks, 16, 132, 4);
  EXPECT_LE(p->max_chunks, 16);
  EXPECT_GE(p->split_groups, 4);
}

TEST(RecurrenceItems, TooManyPartsAreRefusedWithTheReason) {
  std::string why;
  EXPECT_FALSE(pack_recurrence_items({40, 40}, 16, 4, 4, &why));  // 6 parts, 4 blocks
  EXPECT_NE(why.find("6 blocks of work (2 groups split into parts of at most 16 chunks) do not fit 4 blocks"),
            std::string::npos)
      << why;
  EXPECT_FALSE(pack_recurrence_items({1, 1, 1, 1, 1}, 16, 1, 4, &why));  // 5 groups, at most 4 a block
  EXPECT_THROW(pack_recurrence_items({1}, 0, 1, 1), ValueError);
  EXPECT_THROW(pack_recurrence_items({-1}, 4, 1, 1), ValueError);
}

// The balanced packing on the trained Barabási–Albert layout as the LSTM plans it (nn::LSTM's
// gate layout; 32-unit groups: the forward's K per group is gate 0's block column, the
// backward's the block row of all four gates), on 132 blocks: the busiest block holds 12 chunks
// forward (unsplit 51, random layout 14) and 48 backward (unsplit 204, random 68). A `fits` that
// refuses busier blocks than 40 backward leaves no packing, and says why.
TEST(RecurrenceItems, BalancedPackingOfTheTrainedBarabasiAlbertLayout) {
  const LayoutPtr ba = nn::lstm_gate_layout(*barabasi_albert_layout(4096, 4096, 32, 4, 1001));
  auto any = [](const RecurrencePacking&, std::string*) { return true; };
  for (bool backward : {false, true}) {
    const std::vector<int32_t>& ptr = backward ? ba->row_ptr() : ba->col_ptr();
    std::vector<int> chunks;
    for (int g = 0; g < 128; ++g) chunks.push_back(ptr[g + 1] - ptr[g]);
    ASSERT_EQ(*std::max_element(chunks.begin(), chunks.end()), backward ? 204 : 51);
    const std::optional<RecurrencePacking> p = balanced_recurrence_packing(chunks, 132, 4, any);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->max_chunks, backward ? 48 : 12);
    EXPECT_LE(static_cast<int>(p->blocks.size()), 132);
    int dealt = 0;
    for (const Items& b : p->blocks)
      for (const RecurrenceItem& it : b) dealt += it.end - it.begin;
    EXPECT_EQ(dealt, std::accumulate(chunks.begin(), chunks.end(), 0));
    if (backward) {
      std::string why;
      auto at_most_40 = [](const RecurrencePacking& q, std::string* w) {
        if (q.max_chunks <= 40) return true;
        *w = "busiest " + std::to_string(q.max_chunks);
        return false;
      };
      EXPECT_FALSE(balanced_recurrence_packing(chunks, 132, 4, at_most_40, &why));
      EXPECT_FALSE(why.empty());
    }
  }
  std::string why;  // nothing to split
  EXPECT_FALSE(balanced_recurrence_packing({1, 1}, 4, 4, any, &why));
  EXPECT_NE(why.find("no group has more than one chunk"), std::string::npos) << why;
}

// The fewest parts on the same layout's forward: with blocks of at most 20 chunks (about what an
// H200 block's shared memory holds beside the ring) the longest parts that fit are 20 chunks, and
// fewer blocks hold two groups than in the balanced packing (5 against 22); more parts only when
// the blocks must hold fewer chunks; none when no split fits, with the reason.
TEST(RecurrenceItems, FewestPartsOfTheTrainedBarabasiAlbertLayout) {
  const LayoutPtr ba = nn::lstm_gate_layout(*barabasi_albert_layout(4096, 4096, 32, 4, 1001));
  std::vector<int> chunks;
  for (int g = 0; g < 128; ++g) chunks.push_back(ba->col_ptr()[g + 1] - ba->col_ptr()[g]);
  auto at_most = [](int limit) {
    return [limit](const RecurrencePacking& q, std::string* w) {
      if (q.max_chunks <= limit) return true;
      *w = "busiest " + std::to_string(q.max_chunks);
      return false;
    };
  };
  auto two_group_blocks = [](const RecurrencePacking& q) {
    int n = 0;
    for (const Items& b : q.blocks) n += b.size() > 1;
    return n;
  };
  const std::optional<RecurrencePacking> fewest = fewest_parts_packing(chunks, 132, 4, at_most(20));
  ASSERT_TRUE(fewest);
  EXPECT_EQ(fewest->max_chunks, 20);
  EXPECT_EQ(fewest->split_groups, 7);
  EXPECT_EQ(two_group_blocks(*fewest), 5);
  int dealt = 0;
  for (const Items& b : fewest->blocks)
    for (const RecurrenceItem& it : b) dealt += it.end - it.begin;
  EXPECT_EQ(dealt, std::accumulate(chunks.begin(), chunks.end(), 0));
  const std::optional<RecurrencePacking> balanced = balanced_recurrence_packing(chunks, 132, 4, at_most(20));
  ASSERT_TRUE(balanced);
  EXPECT_EQ(two_group_blocks(*balanced), 22);
  const std::optional<RecurrencePacking> finer = fewest_parts_packing(chunks, 132, 4, at_most(16));
  ASSERT_TRUE(finer);
  EXPECT_EQ(finer->max_chunks, 16);
  std::string why;
  EXPECT_FALSE(fewest_parts_packing(chunks, 132, 4, at_most(8), &why));
  EXPECT_FALSE(why.empty());
}

}  // namespace
}  // namespace tessera
