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

}  // namespace sm80
}  // namespace cuda
}  // namespace tessera
