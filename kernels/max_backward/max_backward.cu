// max_backward on the GPU: dx[o, k, i] = g[o, i] if k == indices[o, i] else 0, with dx viewed
// as [outer, n, inner] and g, indices [outer, inner]. One thread per element of dx (a gather,
// not a scatter: every element is written exactly once, no memset, no atomics).
// An index outside [0, n) matches no k, so its gradient is dropped: the CPU kernel's
// ValueError would need the indices on the host, which a GPU step must not wait for.
#include "core/cuda/check.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/max_backward/max_backward.h"

namespace tessera {

namespace {

template <class T>
__global__ void max_backward_kernel(const T* g, const int32_t* idx, T* dx, int64_t n, int64_t inner, int64_t total) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e % inner, k = (e / inner) % n, o = e / (inner * n);
    const int64_t j = o * inner + i;
    dx[e] = idx[j] == k ? g[j] : cuda::from_acc<T>(0);
  }
}

}  // namespace

void op::MaxBackward::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& s = attrs.shape;
  const int d = s.normalize_dim(attrs.dim);
  const int64_t n = s[d], inner = s.prod(d + 1, s.ndim()), total = out[0].numel();
  if (total == 0) return;
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_backward_kernel<<<cuda::blocks_for(total), 256, 0, cuda::current_stream(out[0])>>>(
        static_cast<const T*>(in[0].data_ptr()), static_cast<const int32_t*>(in[1].data_ptr()),
        static_cast<T*>(out[0].data_ptr()), n, inner, total);
  });
  TS_CUDA_LAUNCH_CHECK(kName);
}

}  // namespace tessera
