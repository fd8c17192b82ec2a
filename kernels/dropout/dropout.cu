// dropout on the GPU, drawing the CPU's mask bit for bit: element i uses word i%4 of Philox
// block first + i/4 of stream `seed` (core/philox.h, the same host/device code), and is kept
// iff its uniform u = to_unit_f32(word) >= p (u promoted exactly to f64). y = x·scale where kept,
// else 0, scale = 1/(1 - p) rounded to the compute type (f32 for f32/bf16/f16), as on the CPU.
// first = start + the Philox base (i32[2] {low, high} on the device, read inside the kernel so
// that a captured CUDA graph draws from whatever base was written before its launch), or start.
// One thread per Philox block: it computes the block once and writes up to 4 elements; a packed
// block of four +0 inputs is written without drawing (the output is +0 either way).
#include "core/cuda/check.cuh"
#include "core/philox.h"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/vectorized.cuh"
#include "kernels/dropout/dropout.h"

namespace tessera {

namespace {

// Whether all 4 elements are +0 (all bits clear): then y is +0 whatever the mask (kept:
// +0·scale = +0; dropped: +0), so the block is not drawn. The upper triangle of causal attention
// probabilities is such zeros: half the Philox work of their dropout. (−0 is not skipped: kept
// it stays −0, dropped it becomes +0.)
template <class T>
__device__ __forceinline__ bool all_positive_zero(const cuda::Pack<T, 4>& a) {
  const auto* w = reinterpret_cast<const uint32_t*>(&a);  // the pack's bytes as 32-bit words
  uint32_t any = 0;
#pragma unroll
  for (int k = 0; k < static_cast<int>(sizeof(a) / 4); ++k) any |= w[k];
  return any == 0;
}

// base: nullptr (no base input) or the two words of the block offset added to `start`.
// Packed: x and y aligned for Pack<T, 4> and n a multiple of 4, so block b's elements move as
// one load and one store.
template <bool Packed, class T>
__global__ void dropout_kernel(const T* x, T* y, int64_t n, int64_t nblocks, uint64_t seed, uint64_t start,
                               const int32_t* base, double p, cuda::acc_t<T> scale) {
  using A = cuda::acc_t<T>;
  const uint64_t first =
      start + (base ? philox::join_words(static_cast<uint32_t>(base[0]), static_cast<uint32_t>(base[1])) : 0);
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < nblocks; b += int64_t{gridDim.x} * blockDim.x) {
    philox::Block blk;
    auto draw = [&] { blk = philox::block(seed, first + static_cast<uint64_t>(b)); };
    auto apply = [&](int k, T v) {
      const bool keep = static_cast<double>(philox::to_unit_f32(blk.w[k])) >= p;
      return keep ? cuda::from_acc<T>(cuda::to_acc(v) * scale) : cuda::from_acc<T>(A(0));
    };
    if constexpr (Packed) {
      const cuda::Pack<T, 4> a = reinterpret_cast<const cuda::Pack<T, 4>*>(x)[b];
      if (all_positive_zero(a)) {  // +0 kept or dropped is +0: no need to draw the block
        reinterpret_cast<cuda::Pack<T, 4>*>(y)[b] = a;
        continue;
      }
      draw();
      cuda::Pack<T, 4> r;
#pragma unroll
      for (int k = 0; k < 4; ++k) r.v[k] = apply(k, a.v[k]);
      reinterpret_cast<cuda::Pack<T, 4>*>(y)[b] = r;
    } else {
      draw();
      for (int k = 0; k < 4 && 4 * b + k < n; ++k) y[4 * b + k] = apply(k, x[4 * b + k]);
    }
  }
}

}  // namespace

void op::Dropout::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const int64_t n = in[0].numel();
  if (n == 0) return;
  const int64_t nblocks = static_cast<int64_t>(philox::blocks_for_uniform_f32(static_cast<uint64_t>(n)));
  const int32_t* base = in.size() == 2 ? static_cast<const int32_t*>(in[1].data_ptr()) : nullptr;
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = cuda::acc_t<T>;
    const A scale = static_cast<A>(1.0 / (1.0 - attrs.p));
    const T* x = static_cast<const T*>(in[0].data_ptr());
    T* y = static_cast<T*>(out[0].data_ptr());
    const cudaStream_t stream = cuda::current_stream(out[0]);
    if (n % 4 == 0 && cuda::packable<4>(x, y))
      dropout_kernel<true, T><<<cuda::blocks_for(nblocks), 256, 0, stream>>>(x, y, n, nblocks, attrs.seed,
                                                                              attrs.start, base, attrs.p, scale);
    else
      dropout_kernel<false, T><<<cuda::blocks_for(nblocks), 256, 0, stream>>>(x, y, n, nblocks, attrs.seed,
                                                                               attrs.start, base, attrs.p, scale);
    TS_CUDA_LAUNCH_CHECK(kName);
  });
}

}  // namespace tessera
