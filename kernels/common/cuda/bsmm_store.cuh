// The output stores of the block-sparse matmul tensor-core kernels (bsmm_sm80.cu, bsmm_sm90.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace tessera {
namespace cuda {

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

}  // namespace cuda
}  // namespace tessera
