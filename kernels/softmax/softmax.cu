// softmax on the GPU, per row of x [rows, C] (all leading dims flattened into rows):
//   m = max_j x_j,  s = Σ_j exp(x_j − m)        (one read: online max/sum, acc_t)
//   y_j = exp(x_j − m) · (1 / s)                 (second read, one rounded store)
// One block per row, threads_for(C) threads; thread t handles j = t, t + blockDim, ...
#include "core/cuda/check.cuh"
#include "kernels/common/cuda/softmax_row.cuh"
#include "kernels/softmax/softmax.h"

namespace tessera {

namespace {

template <class T>
__global__ void softmax_rows(const T* x, T* y, int64_t rows, int64_t c) {
  using A = cuda::acc_t<T>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * c;
    const cuda::MaxSumExp<A> st = cuda::row_max_sumexp(xr, c);
    const A inv_s = A(1) / st.s;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
      y[r * c + j] = cuda::from_acc<T>(cuda::dev_exp(cuda::to_acc(xr[j]) - st.m) * inv_s);
  }
}

}  // namespace

void op::Softmax::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  if (in[0].numel() == 0) return;
  const int64_t c = in[0].shape()[-1], rows = in[0].numel() / c;
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_rows<<<cuda::grid_for_rows(rows), cuda::threads_for(c), 0, cuda::current_stream(out[0])>>>(
        static_cast<const T*>(in[0].data_ptr()), static_cast<T*>(out[0].data_ptr()), rows, c);
  });
  TS_CUDA_LAUNCH_CHECK(kName);
}

}  // namespace tessera
