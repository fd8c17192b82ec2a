// What the block-sparse matmul tensor-core kernels (bsmm_sm80.cu, bsmm_sm90_*.cu) share: the order
// of their work items, the output stores and the epilogues' loads.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace tessera {
namespace cuda {

/// Row tiles per group of the work order: on the H200, groups of two are 1.4x faster than column
/// by column at bs 32 and 8 (10% density), 1.05x at bs 64; groups of 1 or 4 measured the same as 2.
constexpr int kRowGroup = 2;

/// The (position in the output-block order, row tile) of work item `item` of tiles_m × outs:
/// row tiles in groups of kRowGroup, each group taking every output block column before the next
/// group starts (the group's rows of A stay in L2 while all columns read them).
__device__ __forceinline__ void work_item(int item, int tiles_m, int outs, int& oi, int& mt) {
  const int span = outs * kRowGroup, gm = item / span, rem = item % span;
  const int rows = min(kRowGroup, tiles_m - gm * kRowGroup);
  oi = rem / rows;
  mt = gm * kRowGroup + rem % rows;
}

/// Stores two neighbouring outputs (cols j, j+1 of one row), adding the old values first when
/// accumulating.
template <class TO>
__device__ __forceinline__ void store_pair(TO* p, float v0, float v1, bool accumulate) {
  if constexpr (std::is_same_v<TO, float>) {
    float2* q = reinterpret_cast<float2*>(p);
    if (accumulate) {
      const float2 old = *q;
      v0 += old.x;
      v1 += old.y;
    }
    *q = make_float2(v0, v1);
  } else if constexpr (std::is_same_v<TO, __nv_bfloat16>) {
    __nv_bfloat162* q = reinterpret_cast<__nv_bfloat162*>(p);
    if (accumulate) {
      const float2 old = __bfloat1622float2(*q);
      v0 += old.x;
      v1 += old.y;
    }
    *q = __floats2bfloat162_rn(v0, v1);
  } else {
    __half2* q = reinterpret_cast<__half2*>(p);
    if (accumulate) {
      const float2 old = __half22float2(*q);
      v0 += old.x;
      v1 += old.y;
    }
    *q = __floats2half2_rn(v0, v1);
  }
}

/// Two neighbouring inputs (cols j, j+1 of one row) as floats.
template <class T>
__device__ __forceinline__ float2 load_pair(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return *reinterpret_cast<const float2*>(p);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(p));
  }
}

template <class T>
__device__ __forceinline__ float load_one(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return *p;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(*p);
  } else {
    return __half2float(*p);
  }
}

template <class TO>
__device__ __forceinline__ void store_one(TO* p, float v) {
  if constexpr (std::is_same_v<TO, float>) {
    *p = v;
  } else if constexpr (std::is_same_v<TO, __nv_bfloat16>) {
    *p = __float2bfloat16_rn(v);
  } else {
    *p = __float2half_rn(v);
  }
}

/// bias[col], bias[col + 1] as floats (0 past `cols`): an epilogue's pair of columns.
template <class TO>
__device__ __forceinline__ float2 bias_pair(const TO* bias, int64_t col, int64_t cols) {
  if (col + 1 < cols) return load_pair(bias + col);
  return make_float2(col < cols ? load_one(bias + col) : 0.f, 0.f);
}

/// out[e] = partial[0][e] + partial[1][e] + ... (in that order), two elements per thread: the dW
/// kernels' sums over parts of the positions, the same bits on every run (elems is even).
template <class TO>
__global__ void sum_parts(const float* __restrict__ partial, TO* __restrict__ out, int64_t elems, int parts) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * 2;
  for (int64_t e = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 2; e < elems; e += stride) {
    float s0 = partial[e], s1 = partial[e + 1];
    for (int q = 1; q < parts; ++q) {
      s0 += partial[q * elems + e];
      s1 += partial[q * elems + e + 1];
    }
    store_pair(out + e, s0, s1, false);
  }
}

}  // namespace cuda
}  // namespace tessera
