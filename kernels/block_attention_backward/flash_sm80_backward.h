// The tensor-core backward of block_attention (flash_sm80_backward.cu, CUDA builds only):
// mma.sync (compute capability 8.0 and later) for bf16/f16 with head dim 32, 64 or 128 and
// attention blocks of 32 or 64, P and dS recomputed in registers from the saved lse (and the
// dropout mask from its Philox stream). Other cases run the
// scalar kernels of block_attention_backward.cu; TESSERA_ATTENTION_PATH=simt forces those.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/block_attention/attention_dropout.h"
#include "kernels/block_attention/flash_sm80.h"

namespace tessera {
namespace cuda {

/// dq, dk, dv [B, H, T, D] from g = dO, q, k, v [B, H, T, D], lse and delta = rowsum(dO ⊙ O)
/// [B, H, T] (f32): dq per query block over its row's key blocks, dk/dv per key block over its
/// column's query blocks (row_ptr/key_blocks and col_ptr/query_blocks of the layout tables).
struct FlashBackward {
  DType dtype;
  int bs;
  int64_t B, H, nb, D;
  double scale;
  const void *g, *q, *k, *v;
  const float *lse, *delta;
  void *dq, *dk, *dv;
  const int32_t *row_ptr, *key_blocks, *col_ptr, *query_blocks;
  AttentionDropout dropout;  ///< the forward's (first relative to base)
  const int32_t* base;       ///< the Philox base on the device, or nullptr
  int64_t G = 1;             ///< query heads per key/value head (k, v, dk, dv [B, H / G, T, D])
  /// Rows of q and dq, of k, v, dk and dv, of dO (flash_sm80.h's FlashStrides); all zero (the
  /// default) means contiguous [B, heads, T, D].
  FlashStrides qs{}, kvs{}, os{};
};

/// Whether flash_backward takes f (then the caller computes delta and calls it).
bool flash_backward_supported(const FlashBackward& f, int device);
void flash_backward(const FlashBackward& f, cudaStream_t stream);

/// Runs the sm_90a kernels (flash_sm90_backward.h) where they apply, else this file's.
/// Launches of the tensor-core backwards (both) so far in this process (tests check which kernel
/// ran), and of the sm_90a ones alone (0 in builds without them).
uint64_t flash_backward_launches();
uint64_t flash_backward_sm90_launches();

}  // namespace cuda
}  // namespace tessera
