// Error checks and launch helpers for CUDA source files (.cu): every CUDA runtime call goes
// through TS_CUDA_CHECK, every launch is followed by TS_CUDA_LAUNCH_CHECK.
//
//   TS_CUDA_CHECK(cudaMemsetAsync(p, 0, n, cuda::current_stream(t)));
//   my_kernel<<<grid, block, 0, cuda::current_stream(t)>>>(...);
//   TS_CUDA_LAUNCH_CHECK("softmax");
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tessera {
namespace cuda {

/// The stream of the device `t` lives on.
inline cudaStream_t current_stream(const Tensor& t) { return static_cast<cudaStream_t>(stream(t.device().index)); }

/// Blocks of `threads` covering n elements, capped at a grid-stride-friendly count.
inline unsigned blocks_for(int64_t n, int threads = 256) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (int64_t{1} << 20) ? (int64_t{1} << 20) : b));
}

}  // namespace cuda
}  // namespace tessera

#define TS_CUDA_CHECK(expr)                                                                        \
  do {                                                                                             \
    const cudaError_t ts_cuda_err_ = (expr);                                                       \
    TS_CHECK(ts_cuda_err_ == cudaSuccess, DeviceError,                                  \
             #expr << " failed: " << cudaGetErrorName(ts_cuda_err_) << ": " << cudaGetErrorString(ts_cuda_err_)); \
  } while (0)

#define TS_CUDA_LAUNCH_CHECK(op_name)                                                              \
  do {                                                                                             \
    const cudaError_t ts_cuda_err_ = cudaGetLastError();                                           \
    TS_CHECK(ts_cuda_err_ == cudaSuccess, DeviceError,                                  \
             op_name << ": kernel launch failed: " << cudaGetErrorName(ts_cuda_err_) << ": "       \
                     << cudaGetErrorString(ts_cuda_err_));                                         \
  } while (0)
