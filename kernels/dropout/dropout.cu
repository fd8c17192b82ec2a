// dropout on the GPU, drawing the CPU's mask bit for bit: element i uses word i%4 of Philox
// block start + i/4 of stream `seed` (core/philox.h, the same host/device code), and is kept
// iff its uniform u = to_unit_f32(word) >= p (u promoted exactly to f64). y = x·scale where kept,
// else 0, scale = 1/(1 - p) rounded to the compute type (f32 for f32/bf16/f16), as on the CPU.
// One thread per Philox block: it computes the block once and writes up to 4 elements.
#include "core/cuda/check.cuh"
#include "core/philox.h"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/dropout/dropout.h"

namespace tessera {

namespace {

template <class T>
__global__ void dropout_kernel(const T* x, T* y, int64_t n, int64_t nblocks, uint64_t seed, uint64_t start, double p,
                               cuda::acc_t<T> scale) {
  using A = cuda::acc_t<T>;
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < nblocks; b += int64_t{gridDim.x} * blockDim.x) {
    const philox::Block blk = philox::block(seed, start + static_cast<uint64_t>(b));
    for (int k = 0; k < 4 && 4 * b + k < n; ++k) {
      const int64_t i = 4 * b + k;
      const bool keep = static_cast<double>(philox::to_unit_f32(blk.w[k])) >= p;
      y[i] = keep ? cuda::from_acc<T>(cuda::to_acc(x[i]) * scale) : cuda::from_acc<T>(A(0));
    }
  }
}

}  // namespace

void Dropout::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const int64_t n = in[0].numel();
  if (n == 0) return;
  const int64_t nblocks = static_cast<int64_t>(philox::blocks_for_uniform_f32(static_cast<uint64_t>(n)));
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = cuda::acc_t<T>;
    const A scale = static_cast<A>(1.0 / (1.0 - attrs.p));
    dropout_kernel<T><<<cuda::blocks_for(nblocks), 256, 0, cuda::current_stream(out[0])>>>(
        static_cast<const T*>(in[0].data_ptr()), static_cast<T*>(out[0].data_ptr()), n, nblocks, attrs.seed,
        attrs.start, attrs.p, scale);
    TS_CUDA_LAUNCH_CHECK(kName);
  });
}

}  // namespace tessera
