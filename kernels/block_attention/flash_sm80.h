// The tensor-core forward of block_attention (flash_sm80.cu, CUDA builds only): one pass per
// query block with the online softmax in registers, mma.sync (compute capability 8.0 and later,
// the H200 included), for bf16/f16 q, k, v with head dim 32, 64 or 128 and attention blocks of 32
// or 64. Other cases (f32, f64, blocks of 8 and 16, other head dims) run the scalar kernel of
// block_attention.cu. TESSERA_ATTENTION_PATH=simt forces that one (read on every call).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace tessera {
namespace cuda {

/// o [B, H, T, D] and lse [B, H, T] (f32, natural log) of block_attention's forward: per
/// (b·h, query block i) over the key blocks of row (h, i) in row_ptr / key_blocks.
struct FlashForward {
  DType dtype;  ///< of q, k, v, o
  int bs;       ///< attention block size
  int64_t B, H, nb, D;
  double scale;
  const void *q, *k, *v;
  void* o;
  float* lse;
  const int32_t* row_ptr;     ///< [H·nb + 1]
  const int32_t* key_blocks;  ///< [nnz]
};

/// Runs f on the tensor-core kernel; false (nothing launched) when that kernel does not take it.
bool flash_forward(const FlashForward& f, int device, cudaStream_t stream);

/// Launches of the tensor-core forward so far in this process (tests check which kernel ran).
uint64_t flash_forward_launches();

}  // namespace cuda
}  // namespace tessera
