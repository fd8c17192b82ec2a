// edge_bias_grad on the GPU: one thread per (group e, channel k) walks n, then the positions, in
// order, adding dy·x and dy where groups[p] = e (threads of one warp read neighbouring channels:
// coalesced rows). f32 sums for bf16/f16, rounded once.
#include "core/cuda/check.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/edge_bias_grad/edge_bias_grad.h"

namespace tessera {

namespace {

template <class T>
__global__ void edge_bias_grads(const T* __restrict__ x, const T* __restrict__ dy, const int32_t* __restrict__ groups,
                                T* __restrict__ dgain, T* __restrict__ dbias, int64_t n, int64_t positions, int64_t K,
                                int64_t E) {
  using A = cuda::acc_t<T>;
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= E * K) return;
  const int64_t e = idx / K, k = idx % K;
  A g = 0, b = 0;
  for (int64_t s = 0; s < n; ++s)
    for (int64_t p = 0; p < positions; ++p) {
      if (groups[p] != e) continue;
      const int64_t i = (s * positions + p) * K + k;
      const A d = cuda::to_acc(dy[i]);
      g += d * cuda::to_acc(x[i]);
      b += d;
    }
  dgain[idx] = cuda::from_acc<T>(g);
  dbias[idx] = cuda::from_acc<T>(b);
}

}  // namespace

void op::EdgeBiasGrad::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  const int64_t K = x.size(x.dim() - 1), E = attrs.count;
  if (E * K == 0) return;
  cuda::dispatch_cuda_float(x.dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    edge_bias_grads<T><<<static_cast<unsigned>((E * K + 127) / 128), 128, 0, cuda::current_stream(out[0])>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<const T*>(in[1].data_ptr()),
        static_cast<const int32_t*>(in[2].data_ptr()), static_cast<T*>(out[0].data_ptr()),
        static_cast<T*>(out[1].data_ptr()), x.size(0), in[2].numel(), K, E);
    TS_CUDA_LAUNCH_CHECK(kName);
  });
}

}  // namespace tessera
