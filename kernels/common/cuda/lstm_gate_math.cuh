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

/// One (row, unit)'s step of the LSTM's backward through time, in the production kernel's
/// expressions and order (lstm_persistent.cu writes them inline; the wgmma backward kernels call
/// this): from the saved gates g = (i, f, o, u), the cell c_t, the previous cell c_{t−1} and dh,
/// with dc the carried cell gradient:
///   dc += dh·o·(1 − tanh²(c_t));  dp = (dc·u·i·(1 − i), dc·c_{t−1}·f·(1 − f), dh·tanh(c_t)·o·(1 − o),
///   dc·i·(1 − u²));  dc = dc·f (what the step before receives, and dc0 after t = 0).
__device__ __forceinline__ void lstm_step_grads(const float (&g)[4], float cell, float cprev, float dh, float& dc,
                                                float (&dp)[4]) {
  const float i = g[0], f = g[1], o = g[2], u = g[3];
  const float tc = tanh_fast(cell);
  const float d = dc + dh * o * (1.f - tc * tc);
  dp[0] = d * u * i * (1.f - i);
  dp[1] = d * cprev * f * (1.f - f);
  dp[2] = dh * tc * o * (1.f - o);
  dp[3] = d * i * (1.f - u * u);
  dc = d * f;
}

}  // namespace cuda
}  // namespace tessera
