// Device copies of the look-up tables of block-sparse layouts (CUDA builds only), uploaded once
// per (layout, device) and shared by every kernel that walks that layout.
//
//   cuda::BlockTables t = cuda::device_tables(attrs.layout, device);   // bsmm, bsmm_dx, bsmm_dw
//   kernel<<<...>>>(..., t.col_ptr, t.col_blocks, t.block_row);
//
// Why a cache beside the layouts rather than a device copy inside them: layouts are immutable
// host objects of core/ (and of kernels/block_attention/), shared by many ops and devices, and
// must stay usable in builds without CUDA; a cache keyed by the layout's address keeps the
// device concern in the CUDA backend and gives each device its own copy. The cache holds a
// weak_ptr to each layout: it never keeps a layout alive, and tables whose layout died are freed
// (stream-ordered, after the kernels that read them) at the next look-up, which also makes a
// new layout at a reused address get fresh tables.
//
// Uploading runs on the device's stream and is not capturable: the first use of a layout on a
// device must happen outside CUDA graph capture (an eager call or warm-up step; or call
// device_tables ahead). A miss during capture is a DeviceError that says so; hits are free.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/sparse/block_layout.h"
#include "core/sparse/attention_layout.h"

#if defined(__CUDACC__)
#define TS_TABLES_HD __host__ __device__ __forceinline__
#else
#define TS_TABLES_HD inline
#endif

namespace tessera {
namespace cuda {

/// The column pairs of the sm_90a gather kernel (bsmm_sm90_gather.cu) over the forward lists (by
/// output block column) or the dX lists (by block row): pair j merges lists pair_list(j, 0, s) and
/// pair_list(j, 1, s) by input block. Stride s = 1 pairs neighbours (2j, 2j+1); the forward lists
/// of nn::LSTM's gate layouts (four gates of q columns with the same lists) pair each column with
/// its twin in the next gate (c, c + q: s = q), so that both share every A strip. Built for bs 32
/// and 64 only (the kernel's); empty (pairs 0) otherwise.
struct PairLists {
  const int32_t* work = nullptr;     ///< [pairs, 3]: (pair j, first entry, end entry), longest first
  const int32_t* entries = nullptr;  ///< [steps, 3]: (input block, k of its first list or -1, of its second or -1)
  int32_t pairs = 0;                 ///< ceil(lists / 2)
  int64_t steps = 0;                 ///< entries: the sum over pairs of the union of their lists
  int32_t stride = 1;                ///< s above
};

/// Member m (0 or 1) of pair j at stride s (PairLists): list (j / s)·2s + j % s + m·s; s = 1
/// gives 2j + m.
TS_TABLES_HD int32_t pair_list(int32_t j, int32_t m, int32_t s) { return (j / s) * 2 * s + j % s + m * s; }

/// BlockLayout tables on the device (see block_layout.h): block_row/block_col [nnz],
/// col_ptr [K/bs + 1], col_blocks [nnz], row_ptr [C/bs + 1]; and the work lists of the
/// tensor-core kernels, built with them: col_work [K/bs, 3] and row_work [C/bs, 3] (per block
/// column / row, by decreasing block count, ties by index, so that the longest output tiles
/// start first: its index o and its list's range begin, end in col_blocks / in k), col_rows
/// [nnz] (block_row[col_blocks[p]]: the input block row of each forward list entry, so that
/// kernels read it without a dependent load), and dw_group [dw_groups, 2] (first block k and
/// count of runs of at most 128/bs consecutive blocks of one block row: the sm_80 dW work items).
struct BlockTables {
  const int32_t* block_row;
  const int32_t* block_col;
  const int32_t* col_ptr;
  const int32_t* col_blocks;
  const int32_t* row_ptr;
  const int32_t* col_work;
  const int32_t* row_work;
  const int32_t* col_rows;
  const int32_t* dw_group;
  int32_t dw_groups;
  /// [dw_col_runs, 3]: runs of at most dw_col_run_size(bs) consecutive entries of one block
  /// column's list (list begin in col_blocks, count, block column), longest first: the sm_90a
  /// dW work items (the blocks of a run share their dY strip)
  const int32_t* dw_col_run;
  int32_t dw_col_runs;
  /// Four device ints of scratch per (layout, device), 0 between launches: the work-item counter
  /// of the kernels that hand out work dynamically, and the count of their thread blocks done
  /// (the last one sets both back to 0); then the gate-run dW's pace (its steps taken, in ticks)
  /// and its done count, kept the same way. Ops on one device's stream run one after another, so
  /// two launches never share them at once.
  int32_t* counter;
  PairLists col_pairs;  ///< of the forward lists (bsmm)
  PairLists row_pairs;  ///< of the dX lists (bsmm_dx)
};

/// AttentionLayout tables on the device (see attention_layout.h): row_ptr [H·nb + 1],
/// key_blocks [nnz], col_ptr [H·nb + 1], query_blocks [nnz].
struct AttentionTables {
  const int32_t* row_ptr;
  const int32_t* key_blocks;
  const int32_t* col_ptr;
  const int32_t* query_blocks;
};

/// Blocks of one block row that one dW work item of the sm_80 tensor-core kernel takes (128 / bs),
/// and blocks of one block column that one of the sm_90a kernel takes (256 / bs: four m64
/// products of 64 / bs blocks each).
inline int32_t dw_group_size(int64_t bs) { return static_cast<int32_t>(128 / bs); }
inline int32_t dw_col_run_size(int64_t bs) { return static_cast<int32_t>(256 / bs); }

/// The sm_90a dW kernels' runs for a convolution with `taps` filter taps (bsconv_dw): like
/// dw_col_run, over the column lists with each block's taps as consecutive entries (entry q is
/// tap q % taps of the block at list position q / taps), runs of at most `run` entries
/// (bsmm_tc.h's conv_gradient_run_size: dw_col_run_size(bs) for the per-tap kernel), longest
/// first: [runs, 3] (first entry, count, block column). Cached per (layout, taps, run, device)
/// like device_tables.
struct ConvRuns {
  const int32_t* run;
  int32_t runs;
};
ConvRuns conv_dw_runs(const LayoutPtr& layout, int32_t taps, int32_t run, int device);

/// The sm_90a dW kernel's runs for nn::LSTM's gate layouts (bsmm_sm90_gate_gradient.cu): where the
/// layout's block columns split into four gates of q columns whose lists c, c + q, c + 2q, c + 3q
/// hold the same block rows (lstm_gate_layout), runs of at most 8 consecutive entries of each
/// gate-0 column c < q, longest first: run [runs, 3] (first entry in col_blocks, count, column c),
/// with the layout's col_ptr and q. runs 0 for any other layout. Cached per (layout, device).
struct GateRuns {
  const int32_t* run;
  int32_t runs;
  const int32_t* col_ptr;  ///< [K/bs + 1]
  int32_t q;
};
GateRuns gate_dw_runs(const LayoutPtr& layout, int device);

/// bsmm's column quads of a gate layout (gate_quad_lists.h): work [quads, 3] (gate-0 column c,
/// first entry, end entry), longest first, entries [E, 5] (input block row, the four gates' blocks);
/// quads = q for a gate layout, 0 for any other. Cached per (layout, device).
struct GateQuadTables {
  const int32_t* work;
  const int32_t* entries;
  int32_t quads;
};
GateQuadTables gate_fwd_quads(const LayoutPtr& layout, int device);

/// The runs and entries of bsmm_dw_pair's gate-run kernel for layouts a and b (gate_pair_runs.h,
/// runs of at most 8), where both are gate layouts of the same q and block size and the pair saves
/// at least 1/16 of two launches' runs (pair_pays); runs 0 otherwise.
/// Cached per (a, b, device) while both live.
struct GatePairTables {
  const int32_t* run;      ///< [runs, 3]
  int32_t runs;
  const int32_t* entries;  ///< [E, 5]
  int32_t q;               ///< block columns a gate (dY's gate g of column c is column c + g·q)
  bool every_column;       ///< every gate-0 column has a run (gate_pair_runs.h)
};
GatePairTables gate_pair_dw_runs(const LayoutPtr& a, const LayoutPtr& b, int device);

/// q where `l` is a gate layout: its block columns four gates of q columns whose lists c, c + q,
/// c + 2q and c + 3q hold the same block rows in the same order (nn::lstm_gate_layout); else 0.
/// An O(nnz) scan on the host.
int32_t gate_quarter(const BlockLayout& l);

/// The tables of `layout` on `device`, uploaded on first use (valid while the layout lives).
BlockTables device_tables(const LayoutPtr& layout, int device);
AttentionTables device_tables(const AttentionLayoutPtr& layout, int device);

/// (layout, device) entries the cache holds now, dead layouts' included until the next look-up
/// frees them; for tests.
size_t cached_layout_tables();

}  // namespace cuda
}  // namespace tessera
