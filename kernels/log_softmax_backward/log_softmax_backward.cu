// log_softmax_backward on the GPU, per row of g, y [rows, C]:
//   S = Σ_k g_k            (block sum in acc_t, fixed order)
//   dx_j = g_j − exp(y_j) · S
// One block per row, threads_for(C) threads; thread t handles j = t, t + blockDim, ...
#include "core/cuda/check.cuh"
#include "kernels/common/cuda/softmax_row.cuh"
#include "kernels/log_softmax_backward/log_softmax_backward.h"

namespace tessera {

namespace {

template <class T>
__global__ void log_softmax_backward_rows(const T* g, const T* y, T* dx, int64_t rows, int64_t c) {
  using A = cuda::acc_t<T>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* gr = g + r * c;
    const T* yr = y + r * c;
    A s = 0;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s += cuda::to_acc(gr[j]);
    s = cuda::block_sum(s);
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
      dx[r * c + j] = cuda::from_acc<T>(cuda::to_acc(gr[j]) - cuda::dev_exp(cuda::to_acc(yr[j])) * s);
  }
}

}  // namespace

void op::LogSoftmaxBackward::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  if (in[0].numel() == 0) return;
  const int64_t c = in[0].shape()[-1], rows = in[0].numel() / c;
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    log_softmax_backward_rows<<<cuda::grid_for_rows(rows), cuda::threads_for(c), 0, cuda::current_stream(out[0])>>>(
        static_cast<const T*>(in[0].data_ptr()), static_cast<const T*>(in[1].data_ptr()),
        static_cast<T*>(out[0].data_ptr()), rows, c);
  });
  TS_CUDA_LAUNCH_CHECK(kName);
}

}  // namespace tessera
