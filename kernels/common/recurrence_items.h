// How the persistent LSTM recurrence (kernels/common/cuda/lstm_persistent.cu) deals its groups of
// hidden units out to thread blocks when one group's slice of W_h is too large for one block's
// shared memory (the hubs of a Barabási–Albert layout): the group's K (its W_h rows, in chunks of
// one block row each) is split into parts, each part in a block of its own, whose f32 partial
// sums the group's owner (part 0) adds in part order each step. Host code, every build.
//
//   std::optional<RecurrencePacking> p = pack_recurrence_items(chunks_per_group, /*max_part=*/16, sms);
//   for (const RecurrenceItem& it : p->blocks[b]) ...   // block b's work, in order
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tessera {

/// Chunks [begin, end) of group `group`'s K, part `part` of `parts`. Part 0 owns the group: it
/// adds the other parts' partial sums (in part order) to its own and runs the gate epilogue.
struct RecurrenceItem {
  int group = 0, begin = 0, end = 0, part = 0, parts = 1;
  bool operator==(const RecurrenceItem& o) const {
    return group == o.group && begin == o.begin && end == o.end && part == o.part && parts == o.parts;
  }
};

/// The items of each thread block, and what the largest block holds.
struct RecurrencePacking {
  std::vector<std::vector<RecurrenceItem>> blocks;
  int max_chunks = 0;  ///< chunks of the busiest block (its W_h rows / block size)
  int max_groups = 0;  ///< whole groups of the busiest block (parts count one each)
  int split_groups = 0;
};

/// Packs groups g = 0 .. n-1 of chunks[g] chunks into at most `max_blocks` blocks:
///   - a group of more than max_part chunks becomes ceil(c / max_part) parts of near-equal size
///     (the first c % parts parts one chunk longer), each alone in a block, so no block that
///     waits for partial sums (an owner) holds work another block waits for;
///   - the other groups take a block each while blocks are left; past that, the two lightest
///     blocks of whole groups are merged (ties: the lower first group) until the count fits,
///     no block holding more than max_groups_per_block groups.
/// Blocks are ordered by their first item's (group, part); items within a block by group.
/// nullopt, with `why` set, when the parts alone need more blocks than there are or the
/// merging would pass max_groups_per_block.
std::optional<RecurrencePacking> pack_recurrence_items(const std::vector<int>& chunks, int max_part, int max_blocks,
                                                       int max_groups_per_block, std::string* why = nullptr);

/// The balanced packing: among the splits into parts of at most p = largest − 1, largest − 2, …
/// chunks that pack into max_blocks blocks (smaller p need more blocks: the scan ends at the
/// first that does not) and pass `fits` (the caller's check: its blocks' slices fit shared
/// memory), the one whose busiest block holds the fewest chunks, since the busiest block sets
/// the step's time; ties go to the longer parts (fewer partial sums). nullopt, with `why` set to
/// the last refusal, when none does. On the trained Barabási–Albert layout (H 4096, bs 32,
/// seed 1001, 132 blocks) the busiest block drops from 51 chunks to 12 forward and from 204 to
/// 48 backward (recurrence_items_test.cpp).
std::optional<RecurrencePacking> balanced_recurrence_packing(
    const std::vector<int>& chunks, int max_blocks, int max_groups_per_block,
    const std::function<bool(const RecurrencePacking&, std::string* why)>& fits, std::string* why = nullptr);

/// The packing with the fewest parts: the longest parts (largest − 1, largest − 2, … chunks) that
/// pack into max_blocks blocks and pass `fits`. The forward recurrence takes it where a layout's
/// groups do not fit one block: there each part and each block of two groups costs more than the
/// chunks a finer split takes off the busiest block (the trained Barabási–Albert layout on the H100,
/// forced part sizes: parts of at most 12 chunks, busiest block 12, 22 blocks of two groups, 27.9
/// µs per step; at most 16: 25.9; at most 18 or 20: 24.1, busiest 20, 5 blocks of two groups).
/// nullopt, with `why` set to the last refusal, when none does.
std::optional<RecurrencePacking> fewest_parts_packing(
    const std::vector<int>& chunks, int max_blocks, int max_groups_per_block,
    const std::function<bool(const RecurrencePacking&, std::string* why)>& fits, std::string* why = nullptr);

}  // namespace tessera
