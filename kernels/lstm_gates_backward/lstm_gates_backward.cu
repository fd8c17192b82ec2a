// lstm_gates_backward on the GPU, elementwise over the state [N, H] (gates [N, 4H] = i, f, o, u):
//   dc_t = dc + dh·o·(1 − tanh_c²)
//   dpre_i = dc_t·u·i(1 − i)       dpre_f = dc_t·c_prev·f(1 − f)
//   dpre_o = dh·tanh_c·o(1 − o)    dpre_u = dc_t·i·(1 − u²)       dc_prev = dc_t·f
// One thread per (r, j); math in acc_t, each output rounded once when stored.
#include "core/cuda/check.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/lstm_gates_backward/lstm_gates_backward.h"

namespace tessera {

namespace {

template <class T>
__global__ void lstm_gates_backward_kernel(const T* dh, const T* dc, const T* gates, const T* tanh_c,
                                           const T* c_prev, T* dpre, T* dc_prev, int64_t n, int64_t hs) {
  using A = cuda::acc_t<T>;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n * hs; k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = k / hs, j = k % hs;
    const T* g = gates + r * 4 * hs;
    T* dp = dpre + r * 4 * hs;
    const A i = cuda::to_acc(g[j]), f = cuda::to_acc(g[hs + j]), o = cuda::to_acc(g[2 * hs + j]);
    const A u = cuda::to_acc(g[3 * hs + j]), tc = cuda::to_acc(tanh_c[k]), dhk = cuda::to_acc(dh[k]);
    const A dct = cuda::to_acc(dc[k]) + dhk * o * (A(1) - tc * tc);
    dp[j] = cuda::from_acc<T>(dct * u * i * (A(1) - i));
    dp[hs + j] = cuda::from_acc<T>(dct * cuda::to_acc(c_prev[k]) * f * (A(1) - f));
    dp[2 * hs + j] = cuda::from_acc<T>(dhk * tc * o * (A(1) - o));
    dp[3 * hs + j] = cuda::from_acc<T>(dct * i * (A(1) - u * u));
    dc_prev[k] = cuda::from_acc<T>(dct * f);
  }
}

}  // namespace

void op::LstmGatesBackward::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const int64_t n = in[2].shape()[0], hs = in[2].shape()[1] / 4;
  if (n * hs == 0) return;
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto ptr = [](const Tensor& t) { return static_cast<T*>(t.data_ptr()); };
    lstm_gates_backward_kernel<<<cuda::blocks_for(n * hs), 256, 0, cuda::current_stream(out[0])>>>(
        ptr(in[0]), ptr(in[1]), ptr(in[2]), ptr(in[3]), ptr(in[4]), ptr(out[0]), ptr(out[1]), n, hs);
  });
  TS_CUDA_LAUNCH_CHECK(kName);
}

}  // namespace tessera
