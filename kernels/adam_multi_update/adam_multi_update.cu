// adam_multi_update on the GPU: the Adam-family element update of kernels/common/cuda/adam_step.cuh
// over many parameters per launch.
//
// One launch per (up to) kMaxParams parameters: their pointers, sizes, weight decays and first
// blocks travel in a Table passed by value (__grid_constant__, no host->device copy, so the op
// is capturable in a CUDA graph). Parameter k of a launch is cut into chunks of kChunk elements,
// one block (kThreads threads) per chunk: blocks first_block[k] .. first_block[k + 1] - 1 belong
// to parameter k (an empty one has none). Thread 0 of a block computes parameter k's scalars
// (adam_scalars, with its weight decay); thread t then updates elements t, t + kThreads, ... of
// the chunk with adam_element, the single-tensor kernel's code, so every element gets bitwise
// the value adam_update gives it.
#include <algorithm>

#include "kernels/adam_multi_update/adam_multi_update.h"
#include "kernels/common/cuda/adam_step.cuh"

namespace tessera {

namespace {

constexpr int kMaxParams = 48;    // parameters per launch
constexpr int64_t kChunk = 8192;  // elements per block
constexpr int kThreads = 256;

struct Table {
  const void* p[kMaxParams];
  const void* g[kMaxParams];
  const void* m[kMaxParams];
  const void* v[kMaxParams];
  void* p_out[kMaxParams];
  void* m_out[kMaxParams];
  void* v_out[kMaxParams];
  double weight_decay[kMaxParams];
  int64_t numel[kMaxParams];
  int64_t first_block[kMaxParams + 1];  // first_block[count]: blocks of the launch
  int count;
};
static_assert(sizeof(Table) < 4096, "the table is a kernel parameter (4 KB at most)");

int64_t chunks_of(int64_t n) { return (n + kChunk - 1) / kChunk; }

template <class T, AdamDecay kDecay>
__global__ void __launch_bounds__(kThreads)
    adam_multi_kernel(const __grid_constant__ Table t, const double* lr_t, const double* step_t,
                      const double* scale_t, detail::AdamHyper h, int64_t blocks) {
  __shared__ cuda::AdamScalars<T> sc;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    int k = 0;
    while (b >= t.first_block[k + 1]) ++k;  // the same k for the whole block (skips empty parameters)
    __syncthreads();                        // the previous chunk's readers of sc are done
    if (threadIdx.x == 0) {
      detail::AdamHyper hk = h;
      hk.weight_decay = t.weight_decay[k];
      sc = cuda::adam_scalars<T>(lr_t, step_t, scale_t, hk);
    }
    __syncthreads();
    const cuda::AdamScalars<T> c = sc;
    const int64_t i0 = (b - t.first_block[k]) * kChunk, i1 = ::min(t.numel[k], i0 + kChunk);
    const T* p = static_cast<const T*>(t.p[k]);
    const T* g = static_cast<const T*>(t.g[k]);
    const T* m = static_cast<const T*>(t.m[k]);
    const T* v = static_cast<const T*>(t.v[k]);
    T* p_out = static_cast<T*>(t.p_out[k]);
    T* m_out = static_cast<T*>(t.m_out[k]);
    T* v_out = static_cast<T*>(t.v_out[k]);
#pragma unroll 4
    for (int64_t i = i0 + threadIdx.x; i < i1; i += kThreads)
      cuda::adam_element<T, kDecay>(c, scale_t != nullptr, p, g, m, v, p_out, m_out, v_out, i);
  }
}

}  // namespace

void op::AdamMultiUpdate::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  const size_t n = a.weight_decay.size();
  const double* lr = static_cast<const double*>(in[4 * n].data_ptr());
  const double* step = static_cast<const double*>(in[4 * n + 1].data_ptr());
  const double* scale = in.size() == 4 * n + 3 ? static_cast<const double*>(in[4 * n + 2].data_ptr()) : nullptr;
  const detail::AdamHyper h{a.beta1, a.beta2, a.eps, 0.0};
  const cudaStream_t stream = cuda::current_stream(out[0]);
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t k0 = 0; k0 < n; k0 += kMaxParams) {
      Table t{};
      t.count = static_cast<int>(std::min<size_t>(kMaxParams, n - k0));
      for (int k = 0; k < t.count; ++k) {
        const size_t i = k0 + k;
        t.p[k] = in[i].data_ptr(), t.g[k] = in[n + i].data_ptr();
        t.m[k] = in[2 * n + i].data_ptr(), t.v[k] = in[3 * n + i].data_ptr();
        t.p_out[k] = out[i].data_ptr(), t.m_out[k] = out[n + i].data_ptr(), t.v_out[k] = out[2 * n + i].data_ptr();
        t.weight_decay[k] = a.weight_decay[i];
        t.numel[k] = out[i].numel();
        t.first_block[k + 1] = t.first_block[k] + chunks_of(t.numel[k]);
      }
      const int64_t blocks = t.first_block[t.count];
      if (blocks == 0) continue;  // only empty parameters
      const unsigned grid = static_cast<unsigned>(std::min<int64_t>(blocks, int64_t{1} << 20));
      if (a.decay == AdamDecay::coupled) {
        adam_multi_kernel<T, AdamDecay::coupled><<<grid, kThreads, 0, stream>>>(t, lr, step, scale, h, blocks);
      } else {
        adam_multi_kernel<T, AdamDecay::decoupled><<<grid, kThreads, 0, stream>>>(t, lr, step, scale, h,
                                                                                         blocks);
      }
      TS_CUDA_LAUNCH_CHECK(kName);
    }
  });
}

}  // namespace tessera
