// The dense wgmma forwards' W operand (lstm_wgmma_forward.cu, lstm_wgmma_forward_streamed.cu;
// include from .cu files only): W_h [H, 4H] permuted and transposed once per call so that the 32
// product columns of a group of 8 units are 32 consecutive rows,
//   wt [4H, H],  wt[32g + 8j + e][k] = W_h[k][j·H + 8g + e]   (gate j in nn::LSTM's order i, f, o, u).
#pragma once

#include <cstdint>

namespace tessera {
namespace cuda {
namespace sm90 {

// wt[32g + 8j + e][k] = wh[k][j·H + 8g + e] (above), through a 32 × 32 tile: a block of
// 32 × 8 threads reads 32 K rows × 32 columns of wh (coalesced along the columns) and writes the
// columns as rows of wt (coalesced along K).
template <class T>
__global__ void permute_transpose_kernel(const T* __restrict__ wh, T* __restrict__ wt, int hidden) {
  __shared__ T tile[32][33];
  const int64_t n_cols = 4 * static_cast<int64_t>(hidden);
  const int k0 = blockIdx.y * 32, n0 = blockIdx.x * 32;
  for (int r = threadIdx.y; r < 32; r += 8) tile[r][threadIdx.x] = wh[(k0 + r) * n_cols + n0 + threadIdx.x];
  __syncthreads();
  for (int r = threadIdx.y; r < 32; r += 8) {
    const int n = n0 + r, j = n / hidden, rem = n % hidden;
    const int64_t row = 32 * (rem / 8) + 8 * j + rem % 8;
    wt[row * hidden + k0 + threadIdx.x] = tile[threadIdx.x][r];
  }
}

}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
