// sum_squares on the GPU: out = Σ_k Σ_i round_T(x_k[i]²) in f64, bitwise reproducible.
//
// Pass 1, one launch per (up to) kMaxTensors tensors: the tensors' pointers, sizes and first
// blocks travel in a Table passed by value (1.2 KB of kernel parameters, no host->device copy).
// Tensor k of a launch is cut into chunks of kChunk elements, one block (kThreads threads) per
// chunk: blocks first_block[k] .. first_block[k + 1] - 1 of the launch belong to tensor k (an
// empty tensor has none). Thread t of a block adds the squares of elements t, t + kThreads, ...
// of its chunk in that order (kUnroll loads in flight), then block_sum's fixed tree gives the
// block's f64 partial, stored at partials[launch offset + block]. Squares are rounded to T as
// mul(x, x) stores them (__fmul_rn/__dmul_rn: never contracted into the f64 accumulation).
// Pass 2, one block: thread t adds partials t, t + kThreads, ... in order, block_sum, store.
// Launches: ceil(N / kMaxTensors) + 1; the partials live in one pool tensor (stream ordered),
// so the op is capturable in a CUDA graph.
#include <algorithm>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "kernels/common/cuda/block_reduce.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/sum_squares/sum_squares.h"

namespace tessera {

namespace {

constexpr int kMaxTensors = 48;    // tensors per pass-1 launch
constexpr int64_t kChunk = 16384;  // elements per block
constexpr int kThreads = 256;
constexpr int kUnroll = 4;         // independent loads per thread per step

struct Table {
  const void* ptr[kMaxTensors];
  int64_t numel[kMaxTensors];
  int64_t first_block[kMaxTensors + 1];  // first_block[count]: blocks of the launch
  int count;
};
static_assert(sizeof(Table) < 2048, "the table is a kernel parameter (4 KB at most)");

int64_t chunks_of(int64_t n) { return (n + kChunk - 1) / kChunk; }

// x² rounded to T (as mul stores it), widened to f64.
template <class T>
__device__ __forceinline__ double square(T x) {
  if constexpr (std::is_same_v<T, double>) {
    return __dmul_rn(x, x);
  } else if constexpr (std::is_same_v<T, float>) {
    return static_cast<double>(__fmul_rn(x, x));
  } else {  // bf16/f16: f32 product rounded once to T
    const float f = cuda::to_acc(x);
    return static_cast<double>(cuda::to_acc(cuda::from_acc<T>(__fmul_rn(f, f))));
  }
}

// Blocks b < blocks of one launch: partials[b] = Σ squares of chunk b - first_block[k] of tensor k.
// The table is read where the launch put it (__grid_constant__: no per-thread copy).
template <class T>
__global__ void __launch_bounds__(kThreads)
    square_partials(const __grid_constant__ Table t, double* partials, int64_t blocks) {
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    int k = 0;
    while (b >= t.first_block[k + 1]) ++k;  // the same k for the whole block (skips empty tensors)
    const T* x = static_cast<const T*>(t.ptr[k]);
    const int64_t i0 = (b - t.first_block[k]) * kChunk, i1 = ::min(t.numel[k], i0 + kChunk);
    double s = 0;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += kUnroll * kThreads) {
      double q[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = i + u * kThreads;
        q[u] = j < i1 ? square(x[j]) : 0.0;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) s += q[u];  // element order i, i + kThreads, ...
    }
    s = cuda::block_sum(s);
    if (threadIdx.x == 0) partials[b] = s;
  }
}

// One block: *out = Σ_{b < n} partials[b] (thread strides, then the fixed tree).
__global__ void __launch_bounds__(kThreads) sum_partials(const double* partials, int64_t n, double* out) {
  double s = 0;
  for (int64_t b = threadIdx.x; b < n; b += kThreads) s += partials[b];
  s = cuda::block_sum(s);
  if (threadIdx.x == 0) *out = s;
}

}  // namespace

void op::SumSquares::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  int64_t total = 0;  // pass-1 blocks over all launches
  for (const Tensor& x : in) total += chunks_of(x.numel());
  const Tensor& y = out[0];
  const Tensor partials = empty({total > 0 ? total : 1}, TensorOptions(DType::f64).device(y.device()));
  double* p = static_cast<double*>(partials.data_ptr());
  const cudaStream_t stream = cuda::current_stream(y);
  cuda::dispatch_cuda_float(in[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    int64_t done = 0;  // partials written by earlier launches
    for (size_t k0 = 0; k0 < in.size(); k0 += kMaxTensors) {
      Table t{};
      t.count = static_cast<int>(std::min<size_t>(kMaxTensors, in.size() - k0));
      for (int k = 0; k < t.count; ++k) {
        const Tensor& x = in[k0 + k];
        t.ptr[k] = x.data_ptr();
        t.numel[k] = x.numel();
        t.first_block[k + 1] = t.first_block[k] + chunks_of(x.numel());
      }
      const int64_t blocks = t.first_block[t.count];
      if (blocks == 0) continue;  // only empty tensors
      const unsigned grid = static_cast<unsigned>(std::min<int64_t>(blocks, int64_t{1} << 20));
      square_partials<T><<<grid, kThreads, 0, stream>>>(t, p + done, blocks);
      TS_CUDA_LAUNCH_CHECK(kName);
      done += blocks;
    }
  });
  sum_partials<<<1, kThreads, 0, stream>>>(p, total, static_cast<double*>(y.data_ptr()));
  TS_CUDA_LAUNCH_CHECK(kName);
}

}  // namespace tessera
