// A column range of row-major rows copied with a dtype change, for ops that pass part of each
// row through unchanged (qk_layer_norm's v columns, and their gradient):
//   dst[r·ld + j] = src[r·ld + j]   for rows r < rows, j < cols (widened to f32/f64, then rounded
//   once to D: exact when D is as wide as S)
#pragma once

#include <cstdint>

#include "core/cuda/check.cuh"
#include "kernels/common/cuda/dtype.cuh"

namespace tessera {
namespace cuda {

template <class S, class D>
__global__ void copy_columns_kernel(const S* src, D* dst, int64_t rows, int64_t cols, int64_t ld) {
  const int64_t n = rows * cols;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t at = (i / cols) * ld + i % cols;
    dst[at] = from_acc<D>(to_acc(src[at]));
  }
}

template <class S, class D>
void copy_columns(const S* src, D* dst, int64_t rows, int64_t cols, int64_t ld, cudaStream_t stream,
                  const char* op) {
  if (rows * cols == 0) return;
  copy_columns_kernel<<<blocks_for(rows * cols), 256, 0, stream>>>(src, dst, rows, cols, ld);
  TS_CUDA_LAUNCH_CHECK(op);
}

}  // namespace cuda
}  // namespace tessera
