// Δ = rowsum(dO ⊙ O) of attention's backward, one value per (batch·head, token) row. For 16-bit
// rows of D = 32, 64 or 128 values a group of D/8 lanes takes a row, each lane 16 bytes (8
// values) of dO and O, the group's sums added by shuffles; otherwise a warp per row, its lanes
// reading the row together.
// The rows of dO and O are addressed by FlashStrides (contiguous [B, H, T, D] or the packed
// projection rows), element (b, h, t, d) at b·batch + h·head + t·token + d.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "kernels/common/cuda/flash_sm80.cuh"
#include "kernels/common/cuda/dtype.cuh"

namespace tessera {
namespace cuda {

template <class T>
__global__ void attention_row_dot_kernel(const T* __restrict__ g, const T* __restrict__ o, FlashStrides s,
                                         acc_t<T>* __restrict__ delta, int64_t rows, int64_t H, int64_t Tn,
                                         int64_t D) {
  using A = acc_t<T>;
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  for (int64_t r = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32; r < rows; r += warps) {
    const int64_t t = r % Tn, h = r / Tn % H, b = r / (Tn * H);
    const int64_t at = b * s.batch + h * s.head + t * s.token;
    A acc = 0;
    for (int64_t d = lane; d < D; d += 32) acc += to_acc(g[at + d]) * to_acc(o[at + d]);
#pragma unroll
    for (int m = 16; m > 0; m /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, m);
    if (lane == 0) delta[r] = acc;
  }
}

// 16-bit rows of D values, D/8 lanes (L) a row, 32/L rows per warp; 16-byte aligned rows.
template <class T, int D>
__global__ void attention_row_dot_vec_kernel(const T* __restrict__ g, const T* __restrict__ o, FlashStrides s,
                                             float* __restrict__ delta, int64_t rows, int64_t H, int64_t Tn) {
  constexpr int L = D / 8;
  const int lane = threadIdx.x % 32, sub = lane % L;
  const int64_t groups = int64_t{gridDim.x} * (blockDim.x / L);
  for (int64_t r0 = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32 * (32 / L); r0 < rows; r0 += groups) {
    const int64_t r = r0 + lane / L;  // this lane's row (every lane of the warp runs the loop alike)
    float acc = 0;
    if (r < rows) {
      const int64_t t = r % Tn, h = r / Tn % H, b = r / (Tn * H);
      const int64_t at = b * s.batch + h * s.head + t * s.token + 8 * sub;
      const uint4 gv = *reinterpret_cast<const uint4*>(g + at), ov = *reinterpret_cast<const uint4*>(o + at);
      const T* ge = reinterpret_cast<const T*>(&gv);
      const T* oe = reinterpret_cast<const T*>(&ov);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc += to_acc(ge[e]) * to_acc(oe[e]);
    }
#pragma unroll
    for (int m = L / 2; m > 0; m /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, m);
    if (r < rows && sub == 0) delta[r] = acc;
  }
}

/// delta [B·H·T] (row (b·H + h)·T + t) = sum over d of g·o at (b, h, t, d).
template <class T>
void attention_row_dot(const T* g, const T* o, const FlashStrides& s, acc_t<T>* delta, int64_t B, int64_t H,
                       int64_t Tn, int64_t D, cudaStream_t stream) {
  const int64_t rows = B * H * Tn;
  if (rows == 0) return;
  constexpr int kWarps = 8;
  if constexpr (sizeof(T) == 2) {
    const bool aligned = flash::aligned16(g) && flash::aligned16(o) && flash::aligned16(s);
    auto vec = [&](auto d) {
      constexpr int Dc = decltype(d)::value, rows_per_block = 32 * kWarps / (Dc / 8);
      const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
      attention_row_dot_vec_kernel<T, Dc><<<static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8),
                                            32 * kWarps, 0, stream>>>(g, o, s, delta, rows, H, Tn);
      TS_CUDA_LAUNCH_CHECK("attention row dot (Δ)");
    };
    if (aligned && D == 32) return vec(std::integral_constant<int, 32>{});
    if (aligned && D == 64) return vec(std::integral_constant<int, 64>{});
    if (aligned && D == 128) return vec(std::integral_constant<int, 128>{});
  }
  const int64_t blocks = (rows + kWarps - 1) / kWarps;
  attention_row_dot_kernel<T><<<static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8), 32 * kWarps, 0,
                                stream>>>(g, o, s, delta, rows, H, Tn, D);
  TS_CUDA_LAUNCH_CHECK("attention row dot (Δ)");
}

}  // namespace cuda
}  // namespace tessera
