// expand on the GPU: y[i] = x[ix], ix the broadcast offset of output element i in x (numpy
// rules). Where the output's last dimension is a whole number of 16-byte words (and y is 16-byte
// aligned), each thread writes one word of V = 16 / element-size outputs: one offset computation
// (a division per dimension) per word, the V inputs read at x[o + j·s] (s the last dimension's
// stride in x, 0 or 1), one 16-byte store. Otherwise one thread per element.
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

// words: n / V output words of V elements of W each; s: x's stride along the last output dimension.
template <class W>
__global__ void expand_words_kernel(const W* x, uint4* y, int64_t words, int64_t s, cuda::BroadcastN<1> ix) {
  constexpr int V = 16 / sizeof(W);
  for (int64_t w = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; w < words; w += int64_t{gridDim.x} * blockDim.x) {
    int64_t o[1];
    ix.offsets(w * V, o);
    union {
      uint4 word;
      W e[V];
    } u;
#pragma unroll
    for (int j = 0; j < V; ++j) u.e[j] = x[o[0] + j * s];
    y[w] = u.word;
  }
}

}  // namespace

void op::Expand::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const Tensor &x = in[0], &y = out[0];
  const int64_t n = y.numel();
  if (n == 0) return;
  const auto ix = cuda::make_broadcast<1>(y.shape(), {x.shape()}, kName);
  const int64_t es = static_cast<int64_t>(dtype_size(y.dtype())), v = 16 / es;
  const bool words = es <= 8 && y.dim() > 0 && y.shape()[y.dim() - 1] % v == 0 &&
                     reinterpret_cast<uintptr_t>(y.data_ptr()) % 16 == 0;
  cuda::dispatch_word(static_cast<size_t>(es), kName, [&](auto tag) {
    using W = typename decltype(tag)::type;
    const W* src = static_cast<const W*>(x.data_ptr());
    if constexpr (sizeof(W) <= 8) {
      if (words) {
        const int64_t nw = n / v;
        expand_words_kernel<W><<<cuda::blocks_for(nw), 256, 0, cuda::current_stream(y)>>>(
            src, static_cast<uint4*>(y.data_ptr()), nw, ix.stride[0][ix.ndim - 1], ix);
        TS_CUDA_LAUNCH_CHECK(kName);
        return;
      }
    }
    W* dst = static_cast<W*>(y.data_ptr());
    expand_kernel<W><<<cuda::blocks_for(n), 256, 0, cuda::current_stream(y)>>>(src, dst, n, ix);
    TS_CUDA_LAUNCH_CHECK(kName);
  });
}

}  // namespace tessera
