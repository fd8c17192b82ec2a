// Device math for elementwise kernels, overloaded on the compute type (acc_t: float for
// f32/bf16/f16, double for f64), so that one generic __device__ lambda serves every dtype:
//
//   cuda::unary_op(x, y, kName, [] __device__(auto v) { return cuda::dev_exp(v); });
//
// These are the full-precision CUDA library functions (no fast-math intrinsics): within a few
// ulp of the CPU's Eigen/libm results, not bitwise equal to them. (The names carry a dev_ prefix
// because tessera::exp, tessera::sqrt, ... are the tensor ops.)
#pragma once

#include <cuda_runtime.h>

namespace tessera {
namespace cuda {

__device__ __forceinline__ float dev_exp(float v) { return ::expf(v); }
__device__ __forceinline__ double dev_exp(double v) { return ::exp(v); }
__device__ __forceinline__ float dev_log(float v) { return ::logf(v); }
__device__ __forceinline__ double dev_log(double v) { return ::log(v); }
__device__ __forceinline__ float dev_sqrt(float v) { return ::sqrtf(v); }  // correctly rounded
__device__ __forceinline__ double dev_sqrt(double v) { return ::sqrt(v); }
__device__ __forceinline__ float dev_tanh(float v) { return ::tanhf(v); }
__device__ __forceinline__ double dev_tanh(double v) { return ::tanh(v); }
__device__ __forceinline__ float dev_erf(float v) { return ::erff(v); }
__device__ __forceinline__ double dev_erf(double v) { return ::erf(v); }
__device__ __forceinline__ float dev_pow(float v, float p) { return ::powf(v, p); }
__device__ __forceinline__ double dev_pow(double v, double p) { return ::pow(v, p); }

}  // namespace cuda
}  // namespace tessera
