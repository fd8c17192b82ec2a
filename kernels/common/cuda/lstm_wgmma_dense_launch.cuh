// The host's half of the dense wgmma forwards' launches (lstm_wgmma_forward.cu,
// lstm_wgmma_forward_streamed.cu; include from .cu files only): W_h [H, 4H] permuted and transposed
// once per call so that the 32 product columns of a group of 8 units are 32 consecutive rows,
//   wt [4H, H],  wt[32g + 8j + e][k] = W_h[k][j·H + 8g + e]   (gate j in nn::LSTM's order i, f, o, u),
// the TMA maps, the arrival counter and the kernels' arguments.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/runtime.h"
#include "core/tensor.h"
#include "kernels/common/cuda/bsmm_sm90_common.cuh"
#include "kernels/common/cuda/lstm_wgmma_dense_cell.cuh"

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

/// How many of a block's `boxes` W boxes of `box_bytes` stay resident beside `fixed_bytes` of other
/// shared memory (the streamed kernels' ring and barriers), at most `cap`.
inline int resident_w_boxes(int device, int boxes, int cap, size_t fixed_bytes, int box_bytes) {
  const int fit = static_cast<int>((static_cast<int64_t>(smem_optin(device)) - static_cast<int64_t>(fixed_bytes)) /
                                   box_bytes);
  return std::max(0, std::min({boxes, cap, fit}));
}

/// TESSERA_LSTM_WGMMA_STREAMED (the W-streamed dense kernels, lstm_wgmma_*_streamed.cu): unset or
/// auto on where the resident kernels do not fit (wgmma_streamed_first), as many of W's K boxes
/// resident as fit; 0 off; 1 on before the resident kernels; 1:N the same with at most N resident
/// (the tests stream all or most of W at small H). Returns -1 (off) or the cap; anything else a
/// ValueError.
int streamed_choice();

/// What a dense forward's launch needs besides its kernel: wt (its own buffer, filled on `stream`),
/// the maps of h0 and y [T, B, H] in [64, 64] boxes and of wt in [w_rows, 64] boxes (128-byte
/// swizzle), the zeroed arrival counter and the arguments. release() after the launch (the frees
/// are stream-ordered).
template <class T>
struct DenseForwardLaunch {
  int device;
  size_t wt_bytes;
  void* wt;
  CUtensorMap map_h0, map_y, map_w;
  ForwardArgs args = {};

  DenseForwardLaunch(const Tensor& gx, const Tensor& h0, const Tensor& c0, const Tensor& wh, const Tensor& bias,
                     double forget_bias, const Tensor& y, const Tensor& hT, const Tensor& cT, const Tensor& gates,
                     const Tensor& cells, uint32_t w_rows, cudaStream_t stream) {
    device = gx.device().index;
    const int64_t steps = gx.size(0), batch = gx.size(1), hidden = h0.size(1);
    const DType dt = gx.dtype();
    wt_bytes = static_cast<size_t>(4 * hidden * hidden) * 2;
    wt = allocate(wt_bytes, device);
    permute_transpose_kernel<T>
        <<<dim3(static_cast<unsigned>(4 * hidden / 32), static_cast<unsigned>(hidden / 32)), dim3(32, 8), 0, stream>>>(
            static_cast<const T*>(wh.data_ptr()), static_cast<T*>(wt), static_cast<int>(hidden));
    TS_CUDA_LAUNCH_CHECK("lstm_recurrence (wgmma): W_h's permuted transpose");
    map_h0 = tensor_map(h0.data_ptr(), dt, static_cast<uint64_t>(batch), hidden, 64, 64);
    const uint64_t y_dims[3] = {static_cast<uint64_t>(hidden), static_cast<uint64_t>(batch),
                                static_cast<uint64_t>(steps)};
    const uint32_t y_box[3] = {64, 64, 1};
    map_y = encode_map(y.data_ptr(), dt, 3, y_dims, y_box);
    map_w = tensor_map(wt, dt, static_cast<uint64_t>(4 * hidden), hidden, w_rows, 64);
    args.counter = static_cast<unsigned*>(allocate(256, device));
    TS_CUDA_CHECK(cudaMemsetAsync(args.counter, 0, 256, stream));
    args.steps = static_cast<int>(steps);
    args.batch = static_cast<int>(batch);
    args.hidden = static_cast<int>(hidden);
    args.forget_bias = static_cast<float>(forget_bias);
    args.gx = gx.data_ptr();
    args.bias = bias.defined() ? bias.data_ptr() : nullptr;
    args.c0 = c0.data_ptr();
    args.y = y.data_ptr();
    args.h_last = hT.data_ptr();
    args.c_last = cT.data_ptr();
    args.gates = static_cast<float*>(gates.data_ptr());
    args.cells = static_cast<float*>(cells.data_ptr());
  }

  void release() {
    deallocate(args.counter, 256, device);
    deallocate(wt, wt_bytes, device);
  }
};

/// The dense backwards' arguments (lstm_wgmma_backward.cu, lstm_wgmma_backward_streamed.cu), with a
/// zeroed arrival counter from `device`'s pool (deallocate(args.counter, 256, device) after the
/// launch), and the TMA map of dpre [T, B, 4H] in [64, 64] boxes.
inline BackwardArgs dense_backward_args(const Tensor& dy, const Tensor& dhT, const Tensor& dcT, const Tensor& gates,
                                        const Tensor& cells, const Tensor& c0, const Tensor& dpre, const Tensor& dh0,
                                        const Tensor& dc0, cudaStream_t stream) {
  BackwardArgs a = {};
  a.counter = static_cast<unsigned*>(allocate(256, dy.device().index));
  TS_CUDA_CHECK(cudaMemsetAsync(a.counter, 0, 256, stream));
  a.steps = static_cast<int>(dy.size(0));
  a.batch = static_cast<int>(dy.size(1));
  a.hidden = static_cast<int>(dy.size(2));
  a.dy = dy.data_ptr();
  a.dh_last = dhT.data_ptr();
  a.dc_last = dcT.data_ptr();
  a.gates = static_cast<const float*>(gates.data_ptr());
  a.cells = static_cast<const float*>(cells.data_ptr());
  a.c0 = c0.data_ptr();
  a.dpre = dpre.data_ptr();
  a.dh0 = dh0.data_ptr();
  a.dc0 = dc0.data_ptr();
  return a;
}
inline CUtensorMap dense_dpre_map(const Tensor& dpre) {
  const uint64_t dims[3] = {static_cast<uint64_t>(dpre.size(2)), static_cast<uint64_t>(dpre.size(1)),
                            static_cast<uint64_t>(dpre.size(0))};
  const uint32_t box[3] = {64, 64, 1};
  return encode_map(dpre.data_ptr(), dpre.dtype(), 3, dims, box);
}

}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
