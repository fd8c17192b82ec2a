// Device copies between packed projection rows and per-head tensors (the fallback of
// block_attention_packed and its backward when the tensor-core kernels do not take a case):
// rows [B·T, W] hold `heads` heads of D values from column c0; the per-head tensor is
// [B, heads, T, D]. One thread per element.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera {
namespace packed {

template <class T>
__global__ void copy_heads_kernel(const T* __restrict__ src, T* __restrict__ dst, int64_t n, int64_t heads,
                                  int64_t Tn, int64_t D, int64_t W, int64_t c0, bool to_packed) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = e % D, t = e / D % Tn, h = e / (D * Tn) % heads, b = e / (D * Tn * heads);
    const int64_t p = (b * Tn + t) * W + c0 + h * D + d;  // the element in the packed rows
    if (to_packed)
      dst[p] = src[e];
    else
      dst[e] = src[p];
  }
}

/// unpack (to_packed false): dst [B, heads, T, D] from rows src; pack: rows dst from src.
template <class T>
void copy_heads(const T* src, T* dst, int64_t B, int64_t heads, int64_t Tn, int64_t D, int64_t W, int64_t c0,
                bool to_packed, cudaStream_t stream) {
  const int64_t n = B * heads * Tn * D;
  if (n == 0) return;
  const int64_t blocks = (n + 255) / 256;
  copy_heads_kernel<T><<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), 256, 0, stream>>>(
      src, dst, n, heads, Tn, D, W, c0, to_packed);
}

}  // namespace packed
}  // namespace tessera
