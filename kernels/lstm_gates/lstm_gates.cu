// lstm_gates on the GPU, elementwise over the state [N, H] (pre [N, 4H] in gate order i, f, o, u):
//   i = σ(pre_i),  f = σ(pre_f + forget_bias),  o = σ(pre_o),  u = tanh(pre_u)
//   c = f·c_prev + i·u,   tanh_c = tanh(c),   h = o·tanh_c
// One thread per (r, j); all math in acc_t, every output rounded once when stored.
#include "core/cuda/check.cuh"
#include "kernels/common/cuda/device_math.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/lstm_gates/lstm_gates.h"

namespace tessera {

namespace {

// σ(v) = 1/(1 + e^-v): e^-v overflows to inf for very negative v and gives 0, never NaN.
template <class A>
__device__ __forceinline__ A sigmoid_of(A v) {
  return A(1) / (A(1) + cuda::dev_exp(-v));
}

template <class T>
__global__ void lstm_gates_kernel(const T* pre, const T* c_prev, T* h, T* c, T* gates, T* tanh_c, int64_t n,
                                  int64_t hs, double forget_bias) {
  using A = cuda::acc_t<T>;
  const A fb = static_cast<A>(forget_bias);
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n * hs; k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = k / hs, j = k % hs;
    const T* p = pre + r * 4 * hs;
    T* g = gates + r * 4 * hs;
    const A i = sigmoid_of(cuda::to_acc(p[j]));
    const A f = sigmoid_of(cuda::to_acc(p[hs + j]) + fb);
    const A o = sigmoid_of(cuda::to_acc(p[2 * hs + j]));
    const A u = cuda::dev_tanh(cuda::to_acc(p[3 * hs + j]));
    const A cv = f * cuda::to_acc(c_prev[k]) + i * u;
    const A tc = cuda::dev_tanh(cv);
    g[j] = cuda::from_acc<T>(i);
    g[hs + j] = cuda::from_acc<T>(f);
    g[2 * hs + j] = cuda::from_acc<T>(o);
    g[3 * hs + j] = cuda::from_acc<T>(u);
    c[k] = cuda::from_acc<T>(cv);
    tanh_c[k] = cuda::from_acc<T>(tc);
    h[k] = cuda::from_acc<T>(o * tc);
  }
}

}  // namespace

void op::LstmGates::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const int64_t n = in[0].shape()[0], hs = in[0].shape()[1] / 4;
  if (n * hs == 0) return;
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto ptr = [](const Tensor& t) { return static_cast<T*>(t.data_ptr()); };
    lstm_gates_kernel<<<cuda::blocks_for(n * hs), 256, 0, cuda::current_stream(out[0])>>>(
        ptr(in[0]), ptr(in[1]), ptr(out[0]), ptr(out[1]), ptr(out[2]), ptr(out[3]), n, hs, attrs.forget_bias);
  });
  TS_CUDA_LAUNCH_CHECK(kName);
}

}  // namespace tessera
