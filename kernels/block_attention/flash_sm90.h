// The Hopper (sm_90a) forward of block_attention (flash_sm90.cu), built when the CUDA
// architectures include 90: wgmma on K/V tiles that TMA brings into a ring of shared-memory
// stages, one producer warp and one consumer warpgroup per query block. flash_forward
// (flash_sm80.h) tries it first on compute capability 9.0; it takes bf16/f16 q, k, v with head
// dim 64 or 128, attention blocks of 64 (128 runs refined to 64), no dropout. Everything else,
// and every call under TESSERA_ATTENTION_PATH=sm80 or TESSERA_BSMM_PATH=sm80 (the A100 path, on
// any GPU), runs the mma.sync kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/block_attention/flash_sm80.h"

namespace tessera {
namespace cuda {
namespace sm90 {

/// Whether the sm_90a forward takes f (strides filled in) on `device`.
bool flash_forward_supported(const FlashForward& f, int device);
/// Runs it (flash_forward_supported(f) must hold); false (nothing launched) when the driver
/// refuses a tensor map of f's operands.
bool flash_forward(const FlashForward& f, cudaStream_t stream);
/// Launches so far in this process (tests check which kernel ran).
uint64_t flash_forward_launches();

}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
