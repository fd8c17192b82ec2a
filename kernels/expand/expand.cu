// expand on the GPU: y[i] = x[ix], ix the broadcast offset of output element i in x (numpy
// rules). One thread per output element, moving words of the element size.
#include "kernels/common/cuda/broadcast.cuh"
#include "kernels/common/cuda/byte_copy.cuh"
#include "kernels/expand/expand.h"

namespace tessera {

namespace {

template <class W>
__global__ void expand_kernel(const W* x, W* y, int64_t n, cuda::BroadcastN<1> ix) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t o[1];
    ix.offsets(i, o);
    y[i] = x[o[0]];
  }
}

}  // namespace

void op::Expand::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const Tensor &x = in[0], &y = out[0];
  const int64_t n = y.numel();
  if (n == 0) return;
  const auto ix = cuda::make_broadcast<1>(y.shape(), {x.shape()}, kName);
  cuda::dispatch_word(dtype_size(y.dtype()), kName, [&](auto tag) {
    using W = typename decltype(tag)::type;
    expand_kernel<W><<<cuda::blocks_for(n), 256, 0, cuda::current_stream(y)>>>(static_cast<const W*>(x.data_ptr()),
                                                                               static_cast<W*>(y.data_ptr()), n, ix);
    TS_CUDA_LAUNCH_CHECK(kName);
  });
}

}  // namespace tessera
