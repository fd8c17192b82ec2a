// sum on the GPU: y[o, i] = Σ_k x[o, k, i] with x viewed as [outer, n, inner], accumulated in
// acc_t (f32; f64 for f64) in a fixed order, so the result is bitwise reproducible run to run.
//
// Contiguous rows (inner == 1): one block per row (threads_for(n) threads); thread t adds
// x[t], x[t + blockDim], ... in order, then block_reduce's fixed tree. Rows longer than
// 2·kRowChunk are cut into chunks: pass 1 (one block per [row, chunk]) writes partials
// [outer, chunks] in acc_t, pass 2 sums each row of partials the same way.
// Strided (inner > 1): one thread per output column (o, i), adding k = 0..n-1 in order
// (coalesced over i; kColBatch loads issued before they are added). Columns are cut into
// chunks until there are enough threads to keep DRAM busy (DimReducePlan): pass 1 writes
// partials [outer, chunks, inner], pass 2 walks them in chunk order.
#include "core/cuda/check.cuh"
#include "kernels/common/cuda/block_reduce.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/sum/sum.h"

namespace tessera {

namespace {

using cuda::acc_t;
using cuda::DimReducePlan;
using cuda::from_acc;
using cuda::to_acc;

// Blocks b = (row o, chunk c) over x [rows, n]: y[o, c] = Σ x[o, c·chunk .. min(n, (c+1)·chunk)).
template <class A, class In, class Out>
__global__ void row_sum(const In* x, Out* y, int64_t rows, int64_t n, int64_t chunk, int64_t chunks) {
  for (int64_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const int64_t o = b / chunks, k0 = (b % chunks) * chunk, k1 = ::min(n, k0 + chunk);
    const In* row = x + o * n;
    A s = 0;
    for (int64_t k = k0 + threadIdx.x; k < k1; k += blockDim.x) s += to_acc(row[k]);
    s = cuda::block_sum(s);
    if (threadIdx.x == 0) y[b] = from_acc<Out>(s);
  }
}

constexpr int kColBatch = 8;  // loads a column thread has in flight

// Threads t = (o, c, i) over x [outer, n, inner]: y[o, c, i] = Σ_{k in chunk c} x[o, k, i], in k order.
template <class A, class In, class Out>
__global__ void col_sum(const In* x, Out* y, int64_t outer, int64_t n, int64_t inner, int64_t chunk,
                        int64_t chunks) {
  const int64_t total = outer * chunks * inner;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = t % inner, c = (t / inner) % chunks, o = t / (inner * chunks);
    const int64_t k0 = c * chunk, k1 = ::min(n, k0 + chunk);
    const In* col = x + o * n * inner + i;
    A s = 0;
    int64_t k = k0;
    for (; k + kColBatch <= k1; k += kColBatch) {
      A v[kColBatch];
#pragma unroll
      for (int j = 0; j < kColBatch; ++j) v[j] = to_acc(col[(k + j) * inner]);
#pragma unroll
      for (int j = 0; j < kColBatch; ++j) s += v[j];
    }
    for (; k < k1; ++k) s += to_acc(col[k * inner]);
    y[t] = from_acc<Out>(s);
  }
}

template <class A, class In, class Out>
void launch_sum(const In* x, Out* y, const DimReducePlan& p, cudaStream_t stream) {
  if (p.inner == 1) {
    const int threads = cuda::threads_for(p.chunk);
    row_sum<A, In, Out><<<cuda::grid_for_rows(p.outer * p.chunks), threads, 0, stream>>>(x, y, p.outer, p.n, p.chunk,
                                                                                          p.chunks);
  } else {
    col_sum<A, In, Out><<<cuda::blocks_for(p.outer * p.chunks * p.inner), 256, 0, stream>>>(x, y, p.outer, p.n, p.inner,
                                                                                             p.chunk, p.chunks);
  }
  TS_CUDA_LAUNCH_CHECK("sum");
}

}  // namespace

void op::Sum::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& s = in[0].shape();
  const int d = s.normalize_dim(attrs.dim);
  const DimReducePlan plan(s.prod(0, d), s[d], s.prod(d + 1, s.ndim()));
  if (out[0].numel() == 0) return;
  const cudaStream_t stream = cuda::current_stream(out[0]);
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(in[0].data_ptr());
    T* y = static_cast<T*>(out[0].data_ptr());
    if (plan.chunks == 1) return launch_sum<A>(x, y, plan, stream);
    // Two passes: partials [outer, chunks, inner] in A, then their sum over chunks.
    const DType acc_dtype = std::is_same_v<A, double> ? DType::f64 : DType::f32;
    Tensor partial = empty({plan.outer * plan.chunks * plan.inner}, TensorOptions(acc_dtype).device(out[0].device()));
    A* part = static_cast<A*>(partial.data_ptr());
    launch_sum<A>(x, part, plan, stream);
    DimReducePlan second = plan;
    second.n = second.chunk = plan.chunks;
    second.chunks = 1;
    launch_sum<A>(static_cast<const A*>(part), y, second, stream);
  });
}

}  // namespace tessera
