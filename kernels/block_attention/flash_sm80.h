// The tensor-core forward of block_attention (flash_sm80.cu, CUDA builds only): one pass per
// query block with the online softmax in registers, mma.sync (compute capability 8.0 and later,
// the H200 included), for bf16/f16 q, k, v with head dim 32, 64 or 128 and attention blocks of 32
// or 64. Other cases (f32, f64, blocks of 8 and 16, other head dims) run the scalar kernel of
// block_attention.cu. TESSERA_ATTENTION_PATH=simt forces that one (read on every call).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/block_attention/attention_dropout.h"

namespace tessera {
namespace cuda {

/// Where the rows of one (batch, head) of an operand start and how far apart they are (values):
/// element (b, h, t, d) at b·batch + h·head + t·token + d. Contiguous [B, heads, T, D] is
/// {heads·T·D, T·D, D}; the projection's packed rows [B, T, (heads ...), D] are {T·W, D, W} with W
/// the values per token.
struct FlashStrides {
  int64_t batch = 0, head = 0, token = 0;
  bool empty() const { return token == 0; }
  static FlashStrides contiguous(int64_t heads, int64_t T, int64_t D) { return {heads * T * D, T * D, D}; }
};

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
  AttentionDropout dropout;   ///< on P (first relative to base)
  const int32_t* base;        ///< the Philox base on the device, or nullptr
  int64_t G = 1;              ///< query heads per key/value head (k, v [B, H / G, T, D])
  /// Rows of q, of k and v, of o: element (b, h, t, d) at b·batch + h·head + t·token + d; all
  /// zero (the default) means contiguous [B, heads, T, D] (flash_forward fills them in).
  FlashStrides qs{}, kvs{}, os{};
};

/// Runs f on a tensor-core kernel: the sm_90a one (flash_sm90.h) where it applies, else this
/// file's; false (nothing launched) when neither takes it.
bool flash_forward(const FlashForward& f, int device, cudaStream_t stream);

/// Launches of the tensor-core forwards (sm_90a and mma.sync) so far in this process (tests
/// check which kernel ran).
uint64_t flash_forward_launches();
/// Those of them that ran the sm_90a kernel (0 in builds without it).
uint64_t flash_forward_sm90_launches();

}  // namespace cuda
}  // namespace tessera
