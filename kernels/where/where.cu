// where on the GPU: y[i] = cond[ic] ? a[ia] : b[ib], with (ic, ia, ib) the broadcast offsets of
// output element i (numpy rules over cond, a, b). One thread per output element. Values are
// moved as words of the element size (no conversion), so every dtype is served by four kernels
// and bf16/f16 come out exactly as the CPU's widen-select-round does.
#include "kernels/common/cuda/broadcast.cuh"
#include "kernels/common/cuda/byte_copy.cuh"
#include "kernels/where/where.h"

namespace tessera {

namespace {

template <class W>
__global__ void where_kernel(const uint8_t* c, const W* a, const W* b, W* y, int64_t n, cuda::BroadcastN<3> ix) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t o[3];
    ix.offsets(i, o);
    y[i] = c[o[0]] ? a[o[1]] : b[o[2]];
  }
}

}  // namespace

void op::Where::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const Tensor &c = in[0], &a = in[1], &b = in[2], &y = out[0];
  const int64_t n = y.numel();
  if (n == 0) return;
  const auto ix = cuda::make_broadcast<3>(y.shape(), {c.shape(), a.shape(), b.shape()}, kName);
  cuda::dispatch_word(dtype_size(y.dtype()), kName, [&](auto tag) {
    using W = typename decltype(tag)::type;
    where_kernel<W><<<cuda::blocks_for(n), 256, 0, cuda::current_stream(y)>>>(
        static_cast<const uint8_t*>(c.data_ptr()), static_cast<const W*>(a.data_ptr()),
        static_cast<const W*>(b.data_ptr()), static_cast<W*>(y.data_ptr()), n, ix);
    TS_CUDA_LAUNCH_CHECK(kName);
  });
}

}  // namespace tessera
