// What the tensor-core attention kernels (kernels/block_attention/flash_sm80.cu, forward, and
// kernels/block_attention_backward/flash_sm80_backward.cu) share: tiles of [BS, D] 16-bit values
// in padded shared rows, copied by cp.async, and fragment products over them with mma.sync
// (fragment layouts in mma_sm80.cuh). Rows padded by 8 values (16 bytes) put the 8 rows an
// ldmatrix reads in distinct banks.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/cuda/mma_sm80.cuh"

namespace tessera {
namespace cuda {
namespace flash {

template <int D>
constexpr int kStride = D + 8;

/// Two f32 values as one register of two 16-bit values (the lower index in the low half).
template <class T>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

/// Copies a [BS, D] tile (rows of D contiguous values) into padded shared rows; the block's
/// kThreads threads share the 16-byte chunks. Completes at the next cp_async_wait.
template <class T, int BS, int D, int kThreads>
__device__ __forceinline__ void load_tile(T* dst, const T* src) {
  constexpr int kChunks = BS * D / 8;
  for (int c = threadIdx.x; c < kChunks; c += kThreads) {
    const int r = c / (D / 8), col = (c % (D / 8)) * 8;
    sm80::cp_async16(dst + r * kStride<D> + col, src + static_cast<int64_t>(r) * D + col, true);
  }
}

/// The A fragments [D/16][4] of the warp's 16 rows (row0 .. row0+15) of a tile [*, D].
template <int D>
__device__ __forceinline__ void load_a(uint32_t (&a)[D / 16][4], const void* tile, int row0) {
  const int lane = threadIdx.x % 32;
  const auto* p = static_cast<const uint16_t*>(tile);
#pragma unroll
  for (int kd = 0; kd < D / 16; ++kd)
    sm80::ldmatrix_x4(a[kd], p + (row0 + lane % 16) * kStride<D> + kd * 16 + (lane / 16) * 8);
}

/// acc [BS/8][4] = A·Bᵀ: A the warp's fragments [16, D], B a tile [BS, D] (its rows the columns
/// of the product: n = row of B, k = d).
template <class T, int BS, int D>
__device__ __forceinline__ void product_nt(float (&acc)[BS / 8][4], const uint32_t (&a)[D / 16][4], const T* b) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int nt = 0; nt < BS / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
#pragma unroll
  for (int kd = 0; kd < D / 16; ++kd)
#pragma unroll
    for (int nt = 0; nt < BS / 8; nt += 2) {
      uint32_t f[4];
      sm80::ldmatrix_x4(f, b + ((nt + lane / 16) * 8 + lane % 8) * kStride<D> + kd * 16 + ((lane / 8) % 2) * 8);
      const uint32_t b0[2] = {f[0], f[1]}, b1[2] = {f[2], f[3]};
      sm80::mma_16816<T>(acc[nt], a[kd], b0);
      sm80::mma_16816<T>(acc[nt + 1], a[kd], b1);
    }
}

/// acc [D/8][4] += X·B: X [16, BS] the warp's rows as accumulators x [BS/8][4] (rounded to T:
/// the accumulators of 16 columns are an A fragment), B a tile [BS, D] (its rows the k index).
template <class T, int BS, int D>
__device__ __forceinline__ void product_nn(float (&acc)[D / 8][4], const float (&x)[BS / 8][4], const T* b) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < BS / 16; ++kk) {
    const uint32_t a[4] = {pack<T>(x[2 * kk][0], x[2 * kk][1]), pack<T>(x[2 * kk][2], x[2 * kk][3]),
                           pack<T>(x[2 * kk + 1][0], x[2 * kk + 1][1]), pack<T>(x[2 * kk + 1][2], x[2 * kk + 1][3])};
#pragma unroll
    for (int dn = 0; dn < D / 8; dn += 2) {
      uint32_t f[4];
      sm80::ldmatrix_x4_trans(f, b + (kk * 16 + ((lane / 8) % 2) * 8 + lane % 8) * kStride<D> + (dn + lane / 16) * 8);
      const uint32_t b0[2] = {f[0], f[1]}, b1[2] = {f[2], f[3]};
      sm80::mma_16816<T>(acc[dn], a, b0);
      sm80::mma_16816<T>(acc[dn + 1], a, b1);
    }
  }
}

/// Stores the warp's accumulators [16 rows, D] (rows row0 + g, row0 + g + 8) times `scale` into
/// rows of D values at `dst`.
template <class T, int D>
__device__ __forceinline__ void store_rows(T* dst, const float (&acc)[D / 8][4], int row0, float scale) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    T* row = dst + static_cast<int64_t>(row0 + g + 8 * hh) * D;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn)
      *reinterpret_cast<uint32_t*>(row + dn * 8 + 2 * t) =
          pack<T>(acc[dn][2 * hh] * scale, acc[dn][2 * hh + 1] * scale);
  }
}

}  // namespace flash
}  // namespace cuda
}  // namespace tessera
