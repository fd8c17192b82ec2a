// masked_fill on the GPU: y[i] = mask[im] ? v : x[i], im the broadcast offset of element i in the
// mask (which broadcasts to x's shape). One thread per element, moving words of the element size.
// v is converted to x's dtype once on the host by convert_elements, exactly as the CPU rounds it
// (f64 -> f32 -> bf16/f16 round to nearest even; integers exact, the shape rule checked that).
#include <cstring>

#include "kernels/common/cuda/broadcast.cuh"
#include "kernels/common/cuda/byte_copy.cuh"
#include "kernels/masked_fill/masked_fill.h"

namespace tessera {

namespace {

template <class W>
__global__ void masked_fill_same(const W* x, const uint8_t* m, W* y, W v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = m[i] ? v : x[i];
}

template <class W>
__global__ void masked_fill_broadcast(const W* x, const uint8_t* m, W* y, W v, int64_t n, cuda::BroadcastN<1> ix) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t o[1];
    ix.offsets(i, o);
    y[i] = m[o[0]] ? v : x[i];
  }
}

}  // namespace

void op::MaskedFill::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x = in[0], &mask = in[1], &y = out[0];
  const int64_t n = y.numel();
  if (n == 0) return;
  unsigned char value[16] = {};  // a word of up to 16 bytes is read from it
  convert_elements(&attrs.value, DType::f64, value, y.dtype(), 1);
  const cudaStream_t stream = cuda::current_stream(y);
  cuda::dispatch_word(dtype_size(y.dtype()), kName, [&](auto tag) {
    using W = typename decltype(tag)::type;
    W v;
    std::memcpy(&v, value, sizeof(W));
    const W* px = static_cast<const W*>(x.data_ptr());
    const uint8_t* pm = static_cast<const uint8_t*>(mask.data_ptr());
    W* py = static_cast<W*>(y.data_ptr());
    if (mask.shape() == x.shape()) {
      masked_fill_same<W><<<cuda::blocks_for(n), 256, 0, stream>>>(px, pm, py, v, n);
    } else {
      const auto ix = cuda::make_broadcast<1>(x.shape(), {mask.shape()}, kName);
      masked_fill_broadcast<W><<<cuda::blocks_for(n), 256, 0, stream>>>(px, pm, py, v, n, ix);
    }
    TS_CUDA_LAUNCH_CHECK(kName);
  });
}

}  // namespace tessera
