#include "kernels/common/recurrence_items.h"

#include <algorithm>
#include <tuple>

#include "core/error.h"

namespace tessera {

std::optional<RecurrencePacking> pack_recurrence_items(const std::vector<int>& chunks, int max_part, int max_blocks,
                                                       int max_groups_per_block, std::string* why) {
  TS_CHECK(max_part >= 1 && max_blocks >= 1 && max_groups_per_block >= 1, ValueError,
           "pack_recurrence_items: max_part " << max_part << ", max_blocks " << max_blocks
                                              << " and max_groups_per_block " << max_groups_per_block
                                              << " must be >= 1");
  auto fail = [&](const std::string& w) -> std::optional<RecurrencePacking> {
    if (why) *why = w;
    return std::nullopt;
  };
  struct Block {
    std::vector<RecurrenceItem> items;
    int chunks = 0;
    bool whole = true;  // whole groups only (a split group's part stays alone)
  };
  std::vector<Block> blocks;
  RecurrencePacking out;
  for (int g = 0; g < static_cast<int>(chunks.size()); ++g) {
    const int c = chunks[static_cast<size_t>(g)];
    TS_CHECK(c >= 0, ValueError, "pack_recurrence_items: group " << g << " has " << c << " chunks");
    if (c <= max_part) {
      blocks.push_back({{RecurrenceItem{g, 0, c, 0, 1}}, c, true});
      continue;
    }
    // ceil(c / max_part) parts, the first c % parts of them one chunk longer
    const int parts = (c + max_part - 1) / max_part, base = c / parts, longer = c % parts;
    for (int p = 0, begin = 0; p < parts; ++p) {
      const int len = base + (p < longer ? 1 : 0);
      blocks.push_back({{RecurrenceItem{g, begin, begin + len, p, parts}}, len, false});
      begin += len;
    }
    ++out.split_groups;
  }
  // Too many blocks: merge the two lightest blocks of whole groups (ties: the lower first group)
  // whose groups together stay within max_groups_per_block, until the count fits.
  while (static_cast<int>(blocks.size()) > max_blocks) {
    std::vector<size_t> whole;
    for (size_t b = 0; b < blocks.size(); ++b)
      if (blocks[b].whole) whole.push_back(b);
    auto key = [&](size_t b) { return std::make_tuple(blocks[b].chunks, blocks[b].items.front().group); };
    std::sort(whole.begin(), whole.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
    size_t into = blocks.size(), from = blocks.size();
    for (size_t i = 0; i < whole.size() && into == blocks.size(); ++i)
      for (size_t j = i + 1; j < whole.size(); ++j)
        if (static_cast<int>(blocks[whole[i]].items.size() + blocks[whole[j]].items.size()) <= max_groups_per_block) {
          into = std::min(whole[i], whole[j]);
          from = std::max(whole[i], whole[j]);
          break;
        }
    if (into == blocks.size()) {
      return fail(std::to_string(blocks.size()) + " blocks of work (" + std::to_string(out.split_groups) +
                  " groups split into parts of at most " + std::to_string(max_part) + " chunks) do not fit " +
                  std::to_string(max_blocks) + " blocks of at most " + std::to_string(max_groups_per_block) +
                  " groups");
    }
    Block& a = blocks[into];
    a.items.insert(a.items.end(), blocks[from].items.begin(), blocks[from].items.end());
    std::sort(a.items.begin(), a.items.end(),
              [](const RecurrenceItem& x, const RecurrenceItem& y) { return x.group < y.group; });
    a.chunks += blocks[from].chunks;
    blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(from));
  }
  std::sort(blocks.begin(), blocks.end(), [](const Block& a, const Block& b) {
    return std::make_tuple(a.items.front().group, a.items.front().part) <
           std::make_tuple(b.items.front().group, b.items.front().part);
  });
  for (Block& b : blocks) {
    out.max_chunks = std::max(out.max_chunks, b.chunks);
    out.max_groups = std::max(out.max_groups, static_cast<int>(b.items.size()));
    out.blocks.push_back(std::move(b.items));
  }
  return out;
}

namespace {

// Hands `take` each packing that fits, of parts of at most largest − 1, largest − 2, … chunks
// (longest parts first), until `take` returns true or shorter parts no longer pack into the
// blocks. `why`: the last refusal, when none fits.
using Fits = std::function<bool(const RecurrencePacking&, std::string* why)>;
void scan_packings(const std::vector<int>& chunks, int max_blocks, int max_groups_per_block, const Fits& fits,
                   const std::function<bool(RecurrencePacking&&)>& take, std::string* why) {
  const int largest = chunks.empty() ? 0 : *std::max_element(chunks.begin(), chunks.end());
  std::string last_why = "no group has more than one chunk to split";
  bool any = false;
  for (int part = largest - 1; part >= 1; --part) {
    std::optional<RecurrencePacking> p =
        pack_recurrence_items(chunks, part, max_blocks, max_groups_per_block, &last_why);
    if (!p) break;  // shorter parts need more blocks still
    if (!fits(*p, &last_why)) continue;
    any = true;
    if (take(std::move(*p))) break;
  }
  if (!any && why) *why = last_why;
}

}  // namespace

std::optional<RecurrencePacking> balanced_recurrence_packing(const std::vector<int>& chunks, int max_blocks,
                                                             int max_groups_per_block, const Fits& fits,
                                                             std::string* why) {
  std::optional<RecurrencePacking> best;
  scan_packings(chunks, max_blocks, max_groups_per_block, fits, [&](RecurrencePacking&& p) {
    if (!best || p.max_chunks < best->max_chunks) best = std::move(p);
    return false;  // every fitting split is a candidate
  }, why);
  return best;
}

std::optional<RecurrencePacking> fewest_parts_packing(const std::vector<int>& chunks, int max_blocks,
                                                      int max_groups_per_block, const Fits& fits, std::string* why) {
  std::optional<RecurrencePacking> first;
  scan_packings(chunks, max_blocks, max_groups_per_block, fits, [&](RecurrencePacking&& p) {
    first = std::move(p);
    return true;  // the longest parts that fit
  }, why);
  return first;
}

}  // namespace tessera
