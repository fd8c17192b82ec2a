// The Hopper (sm_90a) tensor-core kernels of the block-sparse matmuls (bsmm_sm90_gather.cu,
// bsmm_sm90_gradient.cu), built when the CUDA architectures include 90. Called through
// bsmm_tc.h, which picks the kernel.
#pragma once

#include "kernels/common/conv_tiles.h"
#include "kernels/common/cuda/bsmm_tc.h"
#include "kernels/common/cuda/layout_tables.h"

namespace tessera {
namespace cuda {
namespace sm90 {

/// Whether these kernels take the call: bf16/f16 operands (output in their dtype or f32), 16-byte
/// aligned pointers, a device of compute capability 9.0; fwd/dx: bs 16, 32 or 64 (gated or not); dW: every
/// block size (8, 16, 32, 64).
bool gather_supported(const GatherProduct& p, int device);
bool gradient_supported(const BlockGradient& g, int device);

/// Whether block_gradient wants g's operands transposed (see gradient_wants_transposed in
/// bsmm_tc.h): bs 8, n a multiple of 8.
bool gradient_wants_transposed(const BlockGradient& g);

/// Whether gather_product runs p as column pairs (bsmm_sm90_gather.cu): bs 32 or 64, N > 128, the
/// output in the operands' dtype, and pairs copy at most 0.8 of the bytes single columns copy
/// (the layout's lists overlap: at random layouts from about half density, the all-blocks layout
/// always). TESSERA_BSMM_PAIRS=0 / 1 turns them off / on wherever they apply (read on every call).
bool pairs_pay(const GatherProduct& p);
/// Whether gather_product takes column quads (GatherProduct::quads, fwd at bs 32 on more than 128
/// rows, ungated, the output in the operands' dtype): before pairs where both apply.
bool quads_take(const GatherProduct& p);

void gather_product(const GatherProduct& p, cudaStream_t stream);

/// The gather kernel in convolution mode (conv_tiles.h): bsconv (p.transpose_w false: p.a = x
/// [N, in…, C], p.out = y [N, out…, K]) or bsconv_dx (true: p.a = dy, p.out = dx), stride 1.
/// p.w is [nnz, taps, bs, bs] with p.nnz = nnz·taps; p.work, p.list and p.list_in are the
/// matmul's (per block; the kernel walks each entry's taps in order). n is the output's
/// positions over the batch (for the rows per tile); a_cols / out_cols the channels.
/// conv_supported: gather_supported, no gate, no accumulate, and conv_tiles_support(ci).
bool conv_supported(const GatherProduct& p, const ConvIndex& ci, int device);
void gather_conv(const GatherProduct& p, const ConvIndex& ci, int64_t batch, cudaStream_t stream);
/// The same products in halo mode (bsconv_sm90_halo.cu: each block's input box copied once and
/// read by every tap); halo_pays: the filter has several taps and the halo boxes fit (every
/// extent at most 256 positions; two of them, the staging and two weight stages in shared memory).
bool halo_pays(const GatherProduct& p, const ConvIndex& ci, int64_t batch);
void gather_conv_halo(const GatherProduct& p, const ConvIndex& ci, int64_t batch, cudaStream_t stream);
/// `device` is the current device (the f32 workspace of a split of N comes from its pool).
void block_gradient(const BlockGradient& g, int device, cudaStream_t stream);

/// The dW kernel in convolution mode: bsconv_dw (g.x = x [N, in…, C], g.dy = dy [N, out…, K],
/// g.dw [nnz, taps, bs, bs] with g.nnz = nnz·taps), stride 1, over tiles of 64 output positions;
/// g.col_run / g.col_runs are the convolution's runs (cuda::conv_dw_runs: runs of the column
/// lists with every block's taps as entries), g.col_blocks / g.col_rows the layout's.
/// conv_gradient_supported: gradient_supported, no gate, not transposed, conv_tiles_support(ci).
bool conv_gradient_supported(const BlockGradient& g, const ConvIndex& ci, int device);
void conv_gradient(const BlockGradient& g, const ConvIndex& ci, int64_t batch, int device, cudaStream_t stream);
/// bsconv_dw in halo mode (bsconv_sm90_dw_halo.cu: per tile of 256 output positions, 128 at bs 64,
/// each block of a run copies its x halo box once for all of its taps in the run); dw_halo_pays: bs
/// 16-64 (64 unless TESSERA_BSCONV_DW_WIDE=0), several taps, and the halo boxes fit (each extent at
/// most 256, two stages); dw_halo_run_size: the entries of a run it wants (cuda::conv_dw_runs).
bool dw_halo_pays(const BlockGradient& g, const ConvIndex& ci, int64_t batch);
int dw_halo_run_size(int bs);
void conv_gradient_halo(const BlockGradient& g, const ConvIndex& ci, int64_t batch, int device, cudaStream_t stream);
/// The halo dW kernel's strip form (bsconv_sm90_dw_strip.cu; TESSERA_BSCONV_DW_STRIP=0 turns it off):
/// dw_strip_takes: the switch on (the default), bs 32, a 3x3 filter of dilation 1 over two spatial axes, the strip
/// tiles' boxes fit; its runs are whole pairs of blocks with all their taps (dw_strip_run_size entries).
bool dw_strip_takes(const BlockGradient& g, const ConvIndex& ci, int64_t batch);
int dw_strip_run_size();
void conv_gradient_strip(const BlockGradient& g, const ConvIndex& ci, int64_t batch, int device, cudaStream_t stream);

/// bsmm_dw for nn::LSTM's gate layouts at bs 32 (bsmm_sm90_gate_gradient.cu): a work item is a
/// run of up to 8 entries of a gate-0 block column for all four gates, whose blocks of one entry
/// share an X strip. gate_gradient_wanted: unless TESSERA_BSMM_DW_GATE_RUNS=0 (1, the default, takes
/// them), bs 32, ungated, not transposed, gradient_supported; `runs` from cuda::gate_dw_runs, with
/// runs.runs > 0 (a gate layout).
bool gate_gradient_wanted(const BlockGradient& g, int device);
void gate_gradient(const BlockGradient& g, const GateRuns& runs, cudaStream_t stream);

/// bsmm_dw_pair on the gate-run kernel: a (x = X_a, dy, dw = dW_a of layout a, not accumulating)
/// and b, both gate layouts, one item a run of gate_pair_runs.h (a's entries of a gate-0 column
/// with b's); `runs` from cuda::gate_pair_dw_runs. gate_pair_gradient_wanted: gate_gradient_wanted
/// for a, not accumulating, b's operands aligned and supported likewise. gate_pair_gradient
/// returns whether it wrote b.column_sums (not null, and every gate-0 column with a run: each
/// column's first run sums its four gates' dY columns).
bool gate_pair_gradient_wanted(const BlockGradient& a, const GatePairOperand& b, int device);
bool gate_pair_gradient(const BlockGradient& a, const GatePairOperand& b, const GatePairTables& runs,
                        cudaStream_t stream);

/// Launches of these kernels so far in this process (all devices).
uint64_t launch_count();
/// Launches of the gate-run dW kernel (counted in launch_count too).
uint64_t gate_launch_count();
/// Launches of the gather kernel as column pairs, and as column quads (counted in launch_count too).
uint64_t pair_launch_count();
uint64_t quad_launch_count();
/// Launches in convolution mode, gather and dW kernels (counted in launch_count too), and of
/// those the halo kernel's, and of those the ones with tall (512-row) tiles, the ones in entry
/// mode (a list entry's taps under one barrier) and those in the strip form (TESSERA_BSCONV_HALO_STRIP).
uint64_t conv_launch_count();
uint64_t halo_launch_count();
uint64_t halo_tall_launch_count();
uint64_t halo_entry_launch_count();
uint64_t halo_strip_launch_count();
/// Launches of the halo dW kernel's strip form (counted in conv_launch_count and halo_launch_count too).
uint64_t dw_strip_launch_count();

}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
