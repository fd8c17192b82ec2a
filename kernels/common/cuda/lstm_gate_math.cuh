// The LSTM gate activations of the GPU recurrence kernels (lstm_persistent.cu and the issue-16
// lab, lstm_wgmma_floor.cu): the fast exponential (__expf: about 2 ulp) and an approximate
// reciprocal; tanh(v) = 1 − 2/(1 + e^{2v}) is within about 1e-7 absolute. e^x overflowing to inf
// gives the limits 0 / −1, never NaN. (The CPU reference uses libm; the differences are far below
// the bf16/f16 rounding of h.) Unlike device_math.cuh's full-precision functions, these are for
// the recurrence's epilogues only.
#pragma once

#include <cuda_runtime.h>

namespace tessera {
namespace cuda {

__device__ __forceinline__ float sigmoid_fast(float v) { return __frcp_rn(1.f + __expf(-v)); }
__device__ __forceinline__ float tanh_fast(float v) { return 1.f - 2.f * __frcp_rn(1.f + __expf(2.f * v)); }

}  // namespace cuda
}  // namespace tessera
