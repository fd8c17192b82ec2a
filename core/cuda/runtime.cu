// Minimal CUDA part of the build: device discovery and a smoke kernel. The full CUDA backend
// (allocator, kernels, streams) arrives with the CUDA issue.
#include <cuda_runtime.h>

#include <vector>

#include "core/cuda/runtime.h"
#include "core/device.h"
#include "core/error.h"

namespace tessera {

int cuda_device_count() {
  int n = 0;
  // No driver or no GPU is not an error here: it means zero devices.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return n;
}

bool cuda_available() { return cuda_device_count() > 0; }

namespace cuda {
namespace {

__global__ void iota_squared(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<float>(i) * static_cast<float>(i);
}

void check(cudaError_t e, const char* what) {
  TS_CHECK(e == cudaSuccess, DeviceError, "CUDA " << what << " failed: " << cudaGetErrorString(e));
}

}  // namespace

std::vector<float> smoke_test(int n) {
  float* d = nullptr;
  check(cudaMalloc(&d, sizeof(float) * n), "cudaMalloc");
  iota_squared<<<(n + 255) / 256, 256>>>(d, n);
  cudaError_t launch = cudaGetLastError();
  std::vector<float> h(n);
  cudaError_t copy = cudaMemcpy(h.data(), d, sizeof(float) * n, cudaMemcpyDeviceToHost);
  cudaFree(d);
  check(launch, "kernel launch");
  check(copy, "cudaMemcpy");
  return h;
}

}  // namespace cuda
}  // namespace tessera
