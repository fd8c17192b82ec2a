// The layout-table cache (see layout_tables.h). Each entry is one i32 device tensor holding a
// layout's tables back to back; the pointers handed out are offsets into it.
#include "kernels/common/cuda/layout_tables.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cuda/check.cuh"
#include "core/tensor.h"
#include "kernels/common/gate_pair_runs.h"
#include "kernels/common/gate_quad_lists.h"

namespace tessera {
namespace cuda {

int32_t gate_quarter(const BlockLayout& l) {
  const auto& col_ptr = l.col_ptr();
  const auto& col_blocks = l.col_blocks();
  const auto& block_row = l.block_row();
  const int64_t cols = static_cast<int64_t>(col_ptr.size()) - 1;
  if (cols < 4 || cols % 4 != 0) return 0;
  const int32_t quarter = static_cast<int32_t>(cols / 4);
  for (int32_t c = 0; c < quarter; ++c)
    for (int32_t g = 1; g < 4; ++g) {
      const int32_t a = col_ptr[c], b = col_ptr[c + g * quarter], len = col_ptr[c + 1] - a;
      if (col_ptr[c + g * quarter + 1] - b != len) return 0;
      for (int32_t i = 0; i < len; ++i)
        if (block_row[col_blocks[a + i]] != block_row[col_blocks[b + i]]) return 0;
    }
  return quarter;
}

namespace {

// Host figures of a BlockLayout's tables, by index: the offsets of the column and row pairs' work
// lists in the tables (their entries follow) and their entry counts (pairs are built for bs 32
// and 64 only, the sm_90a kernel's), the dW group and run counts.
enum HostCount { kColPairsAt, kColPairSteps, kColPairStride, kRowPairsAt, kRowPairSteps, kDwGroups, kDwRuns, kGateQ,
                 kGateColPtrAt, kGateEveryColumn, kHostCounts };
using HostCounts = std::array<int64_t, kHostCounts>;

struct Entry {
  std::weak_ptr<const void> owner;    // the layout; expired once it died
  std::weak_ptr<const void> partner;  // a pair's second layout (gate_pair_dw_runs), else none
  bool paired = false;
  bool dead() const { return owner.expired() || (paired && partner.expired()); }
  Tensor tables;                      // i32 [total], on the entry's device
  HostCounts host;                    // counts that the host needs at launch (see Packed)
};

// What `pack` builds for one layout: the i32 tables uploaded back to back, and counts kept on the
// host (list lengths the kernel choice reads, so that a call does not recount them).
struct Packed {
  std::vector<int32_t> device;
  HostCounts host{};
};

// The device tables of one entry and its host counts.
struct Found {
  const int32_t* base;
  HostCounts host;
};

// (layout address, device, variant: 0, a convolution's runs (taps · 128 + entries a run), or kGateVariant)
// and the second layout of a pair or null
using Key = std::tuple<const void*, int, int, const void*>;
constexpr int kGateVariant = -1;      // gate_dw_runs's tables
constexpr int kGatePairVariant = -2;  // gate_pair_dw_runs's
constexpr int kGateQuadVariant = -3;  // gate_fwd_quads's

std::mutex g_mutex;
// Never destroyed: layouts held in static objects may run kernels until the process ends.
std::map<Key, Entry>& cache() {
  static auto* c = new std::map<Key, Entry>();
  return *c;
}

void append(std::vector<int32_t>& all, const std::vector<int32_t>& part) {
  all.insert(all.end(), part.begin(), part.end());
}

// The device tables of `layout` on `device`, packed by `pack` and uploaded on a miss. `what`
// describes the layout in errors.
Found lookup(const std::shared_ptr<const void>& layout, int device, const std::function<Packed()>& pack,
             const std::function<std::string()>& what, int variant = 0,
             const std::shared_ptr<const void>& partner = nullptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& c = cache();
  set_device(device);
  const bool capturing = is_capturing(device);
  if (!capturing) {
    // Free the tables of dead layouts first (so an address reused by a new layout misses).
    // Freeing is ordered on each table's device stream, after the kernels that read it; it may
    // switch the current device, hence set_device again below.
    for (auto it = c.begin(); it != c.end();) it = it->second.dead() ? c.erase(it) : std::next(it);
    set_device(device);
  }
  const Key key{layout.get(), device, variant, partner.get()};
  auto it = c.find(key);
  if (it != c.end() && !it->second.dead())
    return {static_cast<const int32_t*>(it->second.tables.data_ptr()), it->second.host};
  TS_CHECK(!capturing, DeviceError,
           "the look-up tables of " << what() << " are uploaded to cuda:" << device
                                    << " on the layout's first use there, which ran during CUDA graph capture; "
                                    << "run one step eagerly first (or call cuda::device_tables ahead)");
  const Packed packed = pack();
  const Device dev = Device::cuda(device);
  Tensor t = empty({static_cast<int64_t>(packed.device.size())}, TensorOptions(DType::i32).device(dev));
  cuda::copy(t.data_ptr(), dev, packed.device.data(), Device::cpu(), packed.device.size() * sizeof(int32_t));
  c.insert_or_assign(key, Entry{layout, partner, partner != nullptr, t, packed.host});
  return {static_cast<const int32_t*>(t.data_ptr()), packed.host};
}

// (i, ptr[i], ptr[i+1]) for i = 0 .. ptr.size()-2, by decreasing list length, ties by index.
std::vector<int32_t> longest_first(const std::vector<int32_t>& ptr) {
  std::vector<int32_t> order(ptr.size() - 1);
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return ptr[a + 1] - ptr[a] > ptr[b + 1] - ptr[b]; });
  std::vector<int32_t> work;
  for (int32_t i : order) work.insert(work.end(), {i, ptr[i], ptr[i + 1]});
  return work;
}

// (first k, count) of runs of at most `group` consecutive blocks of one block row, by row.
std::vector<int32_t> row_groups(const BlockLayout& l, int32_t group) {
  std::vector<int32_t> out;
  const auto& row_ptr = l.row_ptr();
  for (size_t r = 0; r + 1 < row_ptr.size(); ++r)
    for (int32_t k = row_ptr[r]; k < row_ptr[r + 1]; k += group)
      out.insert(out.end(), {k, std::min(group, row_ptr[r + 1] - k)});
  return out;
}

// (list begin, count, column) of runs of at most `run` consecutive entries of each block column's
// list in col_blocks, longest first (ties by column).
std::vector<int32_t> col_runs(const BlockLayout& l, int32_t run) {
  std::vector<std::array<int32_t, 3>> runs;
  const auto& col_ptr = l.col_ptr();
  for (size_t c = 0; c + 1 < col_ptr.size(); ++c)
    for (int32_t q = col_ptr[c]; q < col_ptr[c + 1]; q += run)
      runs.push_back({q, std::min(run, col_ptr[c + 1] - q), static_cast<int32_t>(c)});
  std::stable_sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a[1] > b[1]; });
  std::vector<int32_t> out;
  for (const auto& r : runs) out.insert(out.end(), r.begin(), r.end());
  return out;
}

// col_runs over the lists with every block's taps as entries (entry q: the block at list
// position q / taps, tap q % taps): runs of at most `run` consecutive entries, longest first.
std::vector<int32_t> conv_col_runs(const BlockLayout& l, int32_t taps, int32_t run) {
  std::vector<std::array<int32_t, 3>> runs;
  const auto& col_ptr = l.col_ptr();
  for (size_t c = 0; c + 1 < col_ptr.size(); ++c)
    for (int32_t q = col_ptr[c] * taps; q < col_ptr[c + 1] * taps; q += run)
      runs.push_back({q, std::min(run, col_ptr[c + 1] * taps - q), static_cast<int32_t>(c)});
  std::stable_sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a[1] > b[1]; });
  std::vector<int32_t> out;
  for (const auto& r : runs) out.insert(out.end(), r.begin(), r.end());
  return out;
}

// gate_dw_runs's runs (layout_tables.h) and q, or nothing where `l` is not a gate layout.
std::vector<int32_t> gate_col_runs(const BlockLayout& l, int32_t run, int32_t& q) {
  const auto& col_ptr = l.col_ptr();
  q = 0;
  const int32_t quarter = gate_quarter(l);
  if (quarter == 0) return {};
  std::vector<std::array<int32_t, 3>> runs;
  for (int32_t c = 0; c < quarter; ++c)
    for (int32_t e = col_ptr[c]; e < col_ptr[c + 1]; e += run)
      runs.push_back({e, std::min(run, col_ptr[c + 1] - e), c});
  std::stable_sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a[1] > b[1]; });
  std::vector<int32_t> out;
  for (const auto& r : runs) out.insert(out.end(), r.begin(), r.end());
  q = quarter;
  return out;
}

// The column pairs of the sm_90a gather kernel: lists pair_list(j, 0, s) and pair_list(j, 1, s)
// of `lists` (each (input block, k) by increasing input block; s divides half their count unless
// it is 1) merged by input block into entries (input block, k of the first list or -1, k of the
// second or -1), and the work list (j, first entry, end entry) longest first.
struct PairTables {
  std::vector<int32_t> work, entries;
};
PairTables pair_tables(const std::vector<std::vector<std::pair<int32_t, int32_t>>>& lists, int32_t s) {
  PairTables t;
  std::vector<int32_t> ptr{0};
  const std::vector<std::pair<int32_t, int32_t>> none;
  const int32_t count = static_cast<int32_t>(lists.size());
  for (int32_t j = 0; 2 * j < count; ++j) {
    const int32_t la = pair_list(j, 0, s), lb = pair_list(j, 1, s);
    const auto& a = lists[la];
    const auto& b = lb < count ? lists[lb] : none;
    size_t ia = 0, ib = 0;
    while (ia < a.size() || ib < b.size()) {
      const int32_t in = ib == b.size() || (ia < a.size() && a[ia].first <= b[ib].first) ? a[ia].first : b[ib].first;
      const int32_t ka = ia < a.size() && a[ia].first == in ? a[ia++].second : -1;
      const int32_t kb = ib < b.size() && b[ib].first == in ? b[ib++].second : -1;
      t.entries.insert(t.entries.end(), {in, ka, kb});
    }
    ptr.push_back(static_cast<int32_t>(t.entries.size() / 3));
  }
  t.work = longest_first(ptr);
  return t;
}

// The forward lists (per output block column: (block row, k) by row) and the dX lists (per block
// row: (block column, k) by column).
std::vector<std::vector<std::pair<int32_t, int32_t>>> column_lists(const BlockLayout& l) {
  std::vector<std::vector<std::pair<int32_t, int32_t>>> lists(l.block_cols());
  for (size_t c = 0; c < lists.size(); ++c)
    for (int32_t q = l.col_ptr()[c]; q < l.col_ptr()[c + 1]; ++q)
      lists[c].emplace_back(l.block_row()[l.col_blocks()[q]], l.col_blocks()[q]);
  return lists;
}
std::vector<std::vector<std::pair<int32_t, int32_t>>> row_lists(const BlockLayout& l) {
  std::vector<std::vector<std::pair<int32_t, int32_t>>> lists(l.block_rows());
  for (size_t r = 0; r < lists.size(); ++r)
    for (int32_t k = l.row_ptr()[r]; k < l.row_ptr()[r + 1]; ++k) lists[r].emplace_back(l.block_col()[k], k);
  return lists;
}

int32_t count_runs(const std::vector<int32_t>& ptr, int32_t run) {
  int32_t runs = 0;
  for (size_t i = 0; i + 1 < ptr.size(); ++i) runs += (ptr[i + 1] - ptr[i] + run - 1) / run;
  return runs;
}

}  // namespace

BlockTables device_tables(const LayoutPtr& layout, int device) {
  const BlockLayout& l = *layout;
  const Found found = lookup(
      layout, device,
      [&] {
        Packed packed;
        std::vector<int32_t>& all = packed.device;
        for (const auto* part : {&l.block_row(), &l.block_col(), &l.col_ptr(), &l.col_blocks(), &l.row_ptr()})
          append(all, *part);
        append(all, longest_first(l.col_ptr()));
        append(all, longest_first(l.row_ptr()));
        for (int32_t k : l.col_blocks()) all.push_back(l.block_row()[k]);
        append(all, row_groups(l, dw_group_size(l.block_size())));
        append(all, col_runs(l, dw_col_run_size(l.block_size())));
        all.insert(all.end(), {0, 0, 0, 0});  // the counter and its done count; the gate dW's pace and its done count
        packed.host[kDwGroups] = count_runs(l.row_ptr(), dw_group_size(l.block_size()));
        packed.host[kDwRuns] = count_runs(l.col_ptr(), dw_col_run_size(l.block_size()));
        // Column pairs last (each table's entries follow its work list).
        if (l.block_size() >= 32) {
          // a gate layout's columns pair with their twins in the next gate (PairLists)
          const int32_t stride = std::max<int32_t>(1, gate_quarter(l));
          packed.host[kColPairStride] = stride;
          const PairTables cols = pair_tables(column_lists(l), stride), rows = pair_tables(row_lists(l), 1);
          for (auto [pt, at, steps] : {std::tuple{&cols, kColPairsAt, kColPairSteps}, {&rows, kRowPairsAt, kRowPairSteps}}) {
            packed.host[at] = static_cast<int64_t>(all.size());
            packed.host[steps] = static_cast<int64_t>(pt->entries.size() / 3);
            append(all, pt->work);
            append(all, pt->entries);
          }
        }
        return packed;
      },
      [&] { return l.str(); });
  const int32_t* base = found.base;
  const int64_t nnz = l.nnz(), q = l.block_cols(), r = l.block_rows();
  const int32_t* row_ptr = base + 3 * nnz + q + 1;
  const int32_t* col_work = row_ptr + r + 1;
  const int32_t* row_work = col_work + 3 * q;
  const int32_t* col_rows = row_work + 3 * r;
  const int32_t* dw_group = col_rows + nnz;
  const int32_t groups = static_cast<int32_t>(found.host[kDwGroups]);
  const int32_t runs = static_cast<int32_t>(found.host[kDwRuns]);
  const int32_t* dw_col_run = dw_group + 2 * groups;
  int32_t* counter = const_cast<int32_t*>(dw_col_run) + 3 * runs;
  BlockTables t{base,     base + nnz, base + 2 * nnz, base + 2 * nnz + q + 1, row_ptr, col_work, row_work, col_rows,
                dw_group, groups,     dw_col_run,     runs,                   counter};
  if (l.block_size() >= 32) {
    const int32_t col_pairs = static_cast<int32_t>((q + 1) / 2), row_pairs = static_cast<int32_t>((r + 1) / 2);
    const int32_t* cp = base + found.host[kColPairsAt];
    const int32_t* rp = base + found.host[kRowPairsAt];
    t.col_pairs = {cp, cp + 3 * col_pairs, col_pairs, found.host[kColPairSteps],
                   static_cast<int32_t>(found.host[kColPairStride])};
    t.row_pairs = {rp, rp + 3 * row_pairs, row_pairs, found.host[kRowPairSteps], 1};
  }
  return t;
}

ConvRuns conv_dw_runs(const LayoutPtr& layout, int32_t taps, int32_t run, int device) {
  const BlockLayout& l = *layout;
  TS_CHECK(taps >= 1 && taps <= (1 << 20), ValueError, "conv_dw_runs: taps " << taps << " not in 1-2^20");
  TS_CHECK(run >= 1 && run < 128, ValueError, "conv_dw_runs: runs of " << run << " entries, not 1-127");
  const Found found = lookup(
      layout, device,
      [&] {
        Packed packed;
        packed.device = conv_col_runs(l, taps, run);
        packed.host[kDwRuns] = static_cast<int64_t>(packed.device.size() / 3);
        if (packed.device.empty()) packed.device.push_back(0);  // no zero-size upload
        return packed;
      },
      [&] { return l.str() + " (convolution runs, " + std::to_string(taps) + " taps, " + std::to_string(run) + ")"; },
      taps * 128 + run);
  return {found.base, static_cast<int32_t>(found.host[kDwRuns])};
}

GateRuns gate_dw_runs(const LayoutPtr& layout, int device) {
  const BlockLayout& l = *layout;
  const Found found = lookup(
      layout, device,
      [&] {
        Packed packed;
        int32_t q = 0;
        packed.device = gate_col_runs(l, 8, q);
        packed.host[kDwRuns] = static_cast<int64_t>(packed.device.size() / 3);
        packed.host[kGateQ] = q;
        packed.host[kGateColPtrAt] = static_cast<int64_t>(packed.device.size());  // col_ptr follows the runs
        append(packed.device, l.col_ptr());
        return packed;
      },
      [&] { return l.str() + " (gate runs)"; }, kGateVariant);
  return {found.base, static_cast<int32_t>(found.host[kDwRuns]), found.base + found.host[kGateColPtrAt],
          static_cast<int32_t>(found.host[kGateQ])};
}

GateQuadTables gate_fwd_quads(const LayoutPtr& layout, int device) {
  const Found found = lookup(
      layout, device,
      [&] {
        Packed packed;
        const int32_t q = gate_quarter(*layout);
        if (q > 0) {
          GateQuadLists t = gate_quad_lists(*layout, q);
          packed.device = std::move(t.work);
          packed.host[kGateQ] = q;
          packed.host[kGateColPtrAt] = static_cast<int64_t>(packed.device.size());  // the entries follow the work
          append(packed.device, t.entries);
        }
        if (packed.device.empty()) packed.device.push_back(0);  // no zero-size upload
        return packed;
      },
      [&] { return layout->str() + " (gate quads)"; }, kGateQuadVariant);
  return {found.base, found.base + found.host[kGateColPtrAt], static_cast<int32_t>(found.host[kGateQ])};
}

GatePairTables gate_pair_dw_runs(const LayoutPtr& a, const LayoutPtr& b, int device) {
  const Found found = lookup(
      a, device,
      [&] {
        Packed packed;
        const int32_t q = gate_quarter(*a);
        // only where the pair pays (gate_pair_runs.h: it saves at least 1/16 of the runs)
        const bool same_shape = q > 0 && gate_quarter(*b) == q && a->block_size() == b->block_size() &&
                                a->out_features() == b->out_features();
        if (same_shape && pair_pays(pair_run_counts(*a, *b, q, 8))) {
          GatePairRuns t = gate_pair_runs(*a, *b, q, 8);
          packed.device = std::move(t.runs);
          packed.host[kDwRuns] = static_cast<int64_t>(packed.device.size() / 3);
          packed.host[kGateQ] = q;
          packed.host[kGateColPtrAt] = static_cast<int64_t>(packed.device.size());  // the entries follow the runs
          packed.host[kGateEveryColumn] = t.every_column;
          append(packed.device, t.entries);
        }
        if (packed.device.empty()) packed.device.push_back(0);  // no zero-size upload
        return packed;
      },
      [&] { return a->str() + " with " + b->str() + " (gate pair runs)"; }, kGatePairVariant, b);
  return {found.base, static_cast<int32_t>(found.host[kDwRuns]), found.base + found.host[kGateColPtrAt],
          static_cast<int32_t>(found.host[kGateQ]), found.host[kGateEveryColumn] != 0};
}

AttentionTables device_tables(const AttentionLayoutPtr& layout, int device) {
  const AttentionLayout& l = *layout;
  const int32_t* base = lookup(
                            layout, device,
                            [&] {
                              Packed packed;
                              for (const auto* part : {&l.row_ptr(), &l.key_blocks(), &l.col_ptr(), &l.query_blocks()})
                                append(packed.device, *part);
                              return packed;
                            },
                            [&] { return l.str(); })
                            .base;
  const int64_t rows = l.heads() * l.blocks() + 1, nnz = l.nnz();
  return {base, base + rows, base + rows + nnz, base + 2 * rows + nnz};
}

size_t cached_layout_tables() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return cache().size();
}

}  // namespace cuda
}  // namespace tessera
