// The Hopper (sm_90a) backward of block_attention (flash_sm90_backward.cu), built when the CUDA
// architectures include 90: the dq and dk/dv kernels of flash_sm80_backward.h on wgmma, their
// operands brought in by TMA. flash_backward (flash_sm80_backward.h) tries it first on compute
// capability 9.0 for bf16/f16, blocks of 64 (128 refined to 64), head dims 64 and 128, no dropout;
// TESSERA_ATTENTION_PATH=sm80 or TESSERA_BSMM_PATH=sm80 keep the mma.sync kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/block_attention_backward/flash_sm80_backward.h"

namespace tessera {
namespace cuda {
namespace sm90 {

/// Whether the sm_90a backward takes f (strides filled in) on `device`.
bool flash_backward_supported(const FlashBackward& f, int device);
/// Runs it; false (nothing launched) when the driver refuses a tensor map of f's operands.
bool flash_backward(const FlashBackward& f, cudaStream_t stream);
/// Launches so far in this process (tests check which kernel ran).
uint64_t flash_backward_launches();

}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
