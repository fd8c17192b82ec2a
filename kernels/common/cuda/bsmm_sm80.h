// The sm_80 tensor-core kernels of the block-sparse matmuls (bsmm, bsmm_dx, bsmm_dw):
// mma.sync with ldmatrix fragment loads and a cp.async multi-stage pipeline. They run on every
// GPU of compute capability 8.0 or higher (A100, H100/H200). Operands are bf16 or f16 (f32
// sums), or f32 rounded to tf32; outputs in the operand dtype or in f32. Called through
// bsmm_tc.h, which picks the kernel.
#pragma once

#include "kernels/common/cuda/bsmm_tc.h"

namespace tessera {
namespace cuda {

namespace sm80 {

/// Whether these kernels take the call: a 16-bit or (tf32) f32 dtype, every pointer 16-byte
/// aligned, a device of compute capability >= 8.0 (`device`).
bool gather_supported(const GatherProduct& p, int device);
bool gradient_supported(const BlockGradient& g, int device);

void gather_product(const GatherProduct& p, cudaStream_t stream);
/// Launches of these kernels so far in this process (all devices).
uint64_t launch_count();
void block_gradient(const BlockGradient& g, cudaStream_t stream);

/// The same kernels in convolution mode (bsconv, bsconv_dx: p.transpose_w; bsconv_dw), any
/// geometry ci (stride, dilation, padding, 1-3 dimensions): a product's rows are the output's
/// positions over the batch, the A row that one reads at a tap comes from a table that a first
/// kernel fills from ConvIndex once per call (input_row; output_row for dx; i32 [taps, rows] from
/// the device's pool), -1 (padding) copies zeros. w is [nnz, taps, bs, bs] with p.nnz / g.nnz =
/// nnz·taps; the lists and groups are the matmul's (per block). bsconv_dw runs a thread block per
/// (block group of one block row, tap). No gate, no accumulate.
bool conv_supported(const GatherProduct& p, int device);
bool conv_gradient_supported(const BlockGradient& g, int device);
void gather_conv(const GatherProduct& p, const ConvIndex& ci, cudaStream_t stream);
void conv_gradient(const BlockGradient& g, const ConvIndex& ci, cudaStream_t stream);
/// Launches in convolution mode (also counted in launch_count).
uint64_t conv_launch_count();

}  // namespace sm80
}  // namespace cuda
}  // namespace tessera
