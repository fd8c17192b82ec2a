// The LSTM gate activations of the GPU recurrence kernels (lstm_persistent.cu, the wgmma kernels
// and the issue-16 lab, lstm_wgmma_floor.cu): the fast exponential (__expf: about 2 ulp) and the
// hardware reciprocal (rcp.approx.ftz: at most 1 ulp, one MUFU instruction; __frcp_rn's correct
// rounding added a refinement and a branch to a slow path, about ten instructions per activation);
// tanh(v) = 1 − 2/(1 + e^{2v}) is within about 1e-7 absolute. e^x overflowing to inf gives the
// limits 0 / −1, never NaN (the reciprocal of inf is 0; 1 + e^x ≥ 1 is never subnormal). (The CPU
// reference uses libm; the differences are far below the bf16/f16 rounding of h.) Unlike
// device_math.cuh's full-precision functions, these are for the recurrence's epilogues only.
#pragma once

#include <cuda_runtime.h>

namespace tessera {
namespace cuda {

__device__ __forceinline__ float rcp_fast(float v) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}
__device__ __forceinline__ float sigmoid_fast(float v) { return rcp_fast(1.f + __expf(-v)); }
__device__ __forceinline__ float tanh_fast(float v) { return 1.f - 2.f * rcp_fast(1.f + __expf(2.f * v)); }

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
