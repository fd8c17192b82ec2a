// The Hopper (sm_90a) tensor-core kernels of the block-sparse matmuls (bsmm_sm90_gather.cu,
// bsmm_sm90_gradient.cu), built when the CUDA architectures include 90. Called through
// bsmm_tc.h, which picks the kernel.
#pragma once

#include "kernels/common/cuda/bsmm_tc.h"

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

void gather_product(const GatherProduct& p, cudaStream_t stream);
/// `device` is the current device (the f32 workspace of a split of N comes from its pool).
void block_gradient(const BlockGradient& g, int device, cudaStream_t stream);

/// Launches of these kernels so far in this process (all devices).
uint64_t launch_count();
/// Launches of the gather kernel as column pairs (counted in launch_count too).
uint64_t pair_launch_count();

}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
