// edge_bias on the GPU: one thread per element; e = groups[position], y = x·gain[e] + bias[e] for
// 0 ≤ e < E (in the accumulation type, rounded once), x itself otherwise.
#include "core/cuda/check.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/edge_bias/edge_bias.h"

namespace tessera {

namespace {

template <class T>
__global__ void edge_bias_forward(const T* __restrict__ x, const int32_t* __restrict__ groups,
                                  const T* __restrict__ gain, const T* __restrict__ bias, T* __restrict__ y,
                                  int64_t elems, int64_t positions, int64_t K, int64_t E) {
  using A = cuda::acc_t<T>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < elems;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = i % K, e = groups[(i / K) % positions];
    if (e < 0 || e >= E) {
      y[i] = x[i];
    } else {
      A v = cuda::to_acc(x[i]) * cuda::to_acc(gain[e * K + k]);
      if (bias) v += cuda::to_acc(bias[e * K + k]);
      y[i] = cuda::from_acc<T>(v);
    }
  }
}

}  // namespace

void op::EdgeBias::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x = in[0], &y = out[0];
  const int64_t elems = x.numel();
  if (elems == 0) return;
  const int64_t K = x.size(x.dim() - 1), positions = in[1].numel(), E = in[2].size(0);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((elems + 255) / 256, 1 << 20));
  cuda::dispatch_cuda_float(x.dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    edge_bias_forward<T><<<blocks, 256, 0, cuda::current_stream(y)>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<const int32_t*>(in[1].data_ptr()),
        static_cast<const T*>(in[2].data_ptr()), attrs.bias ? static_cast<const T*>(in[3].data_ptr()) : nullptr,
        static_cast<T*>(y.data_ptr()), elems, positions, K, E);
    TS_CUDA_LAUNCH_CHECK(kName);
  });
}

}  // namespace tessera
