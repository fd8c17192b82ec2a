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
#include <utility>
#include <vector>

#include "core/cuda/check.cuh"
#include "core/tensor.h"

namespace tessera {
namespace cuda {
namespace {

struct Entry {
  std::weak_ptr<const void> owner;  // the layout; expired once it died
  Tensor tables;                    // i32 [total], on the entry's device
};

using Key = std::pair<const void*, int>;  // (layout address, device)

std::mutex g_mutex;
// Never destroyed: layouts held in static objects may run kernels until the process ends.
std::map<Key, Entry>& cache() {
  static auto* c = new std::map<Key, Entry>();
  return *c;
}

void append(std::vector<int32_t>& all, const std::vector<int32_t>& part) {
  all.insert(all.end(), part.begin(), part.end());
}

// The device pointer of `layout`'s tables on `device`, packed by `pack` and uploaded on a miss.
// `what` describes the layout in errors.
const int32_t* lookup(const std::shared_ptr<const void>& layout, int device,
                      const std::function<std::vector<int32_t>()>& pack, const std::function<std::string()>& what) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& c = cache();
  set_device(device);
  const bool capturing = is_capturing(device);
  if (!capturing) {
    // Free the tables of dead layouts first (so an address reused by a new layout misses).
    // Freeing is ordered on each table's device stream, after the kernels that read it; it may
    // switch the current device, hence set_device again below.
    for (auto it = c.begin(); it != c.end();) it = it->second.owner.expired() ? c.erase(it) : std::next(it);
    set_device(device);
  }
  const Key key{layout.get(), device};
  auto it = c.find(key);
  if (it != c.end() && !it->second.owner.expired()) return static_cast<const int32_t*>(it->second.tables.data_ptr());
  TS_CHECK(!capturing, DeviceError,
           "the look-up tables of " << what() << " are uploaded to cuda:" << device
                                    << " on the layout's first use there, which ran during CUDA graph capture; "
                                    << "run one step eagerly first (or call cuda::device_tables ahead)");
  const std::vector<int32_t> host = pack();
  const Device dev = Device::cuda(device);
  Tensor t = empty({static_cast<int64_t>(host.size())}, TensorOptions(DType::i32).device(dev));
  cuda::copy(t.data_ptr(), dev, host.data(), Device::cpu(), host.size() * sizeof(int32_t));
  c.insert_or_assign(key, Entry{layout, t});
  return static_cast<const int32_t*>(t.data_ptr());
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

int32_t count_runs(const std::vector<int32_t>& ptr, int32_t run) {
  int32_t runs = 0;
  for (size_t i = 0; i + 1 < ptr.size(); ++i) runs += (ptr[i + 1] - ptr[i] + run - 1) / run;
  return runs;
}

}  // namespace

BlockTables device_tables(const LayoutPtr& layout, int device) {
  const BlockLayout& l = *layout;
  const int32_t* base = lookup(
      layout, device,
      [&] {
        std::vector<int32_t> all;
        for (const auto* part : {&l.block_row(), &l.block_col(), &l.col_ptr(), &l.col_blocks(), &l.row_ptr()})
          append(all, *part);
        append(all, longest_first(l.col_ptr()));
        append(all, longest_first(l.row_ptr()));
        for (int32_t k : l.col_blocks()) all.push_back(l.block_row()[k]);
        append(all, row_groups(l, dw_group_size(l.block_size())));
        append(all, col_runs(l, dw_col_run_size(l.block_size())));
        all.insert(all.end(), {0, 0});  // the counter and its done count
        return all;
      },
      [&] { return l.str(); });
  const int64_t nnz = l.nnz(), q = l.block_cols(), r = l.block_rows();
  const int32_t* row_ptr = base + 3 * nnz + q + 1;
  const int32_t* col_work = row_ptr + r + 1;
  const int32_t* row_work = col_work + 3 * q;
  const int32_t* col_rows = row_work + 3 * r;
  const int32_t* dw_group = col_rows + nnz;
  // The run counts are host figures: count them again (cheap, the same rule).
  const int32_t groups = count_runs(l.row_ptr(), dw_group_size(l.block_size()));
  const int32_t runs = count_runs(l.col_ptr(), dw_col_run_size(l.block_size()));
  const int32_t* dw_col_run = dw_group + 2 * groups;
  int32_t* counter = const_cast<int32_t*>(dw_col_run) + 3 * runs;
  return {base,     base + nnz, base + 2 * nnz, base + 2 * nnz + q + 1, row_ptr, col_work, row_work, col_rows,
          dw_group, groups,     dw_col_run,     runs,                   counter};
}

AttentionTables device_tables(const AttentionLayoutPtr& layout, int device) {
  const AttentionLayout& l = *layout;
  const int32_t* base = lookup(
      layout, device,
      [&] {
        std::vector<int32_t> all;
        for (const auto* part : {&l.row_ptr(), &l.key_blocks(), &l.col_ptr(), &l.query_blocks()}) append(all, *part);
        return all;
      },
      [&] { return l.str(); });
  const int64_t rows = l.heads() * l.blocks() + 1, nnz = l.nnz();
  return {base, base + rows, base + rows + nnz, base + 2 * rows + nnz};
}

size_t cached_layout_tables() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return cache().size();
}

}  // namespace cuda
}  // namespace tessera
