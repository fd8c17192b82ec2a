// max (and, through extreme_along_dim, min) on the GPU. With x viewed as [outer, n, inner]:
//   values[o, i] = x[o, k*, i],  indices[o, i] = k*,  k* = the first k of the maximum (minimum)
// where a NaN beats every number and the first NaN wins, exactly as the CPU kernel. Values are
// elements of x (compared in acc_t, which holds bf16/f16 exactly), so the result is exact and
// independent of the reduction order; only the tie rule (lowest index) needs care.
//
// Contiguous rows (inner == 1): one block per row (threads_for(n) threads); each thread keeps
// the best (value, index) of x[t], x[t + blockDim], ..., then block_reduce combines pairs.
// Rows longer than 2·kRowChunk: pass 1 writes one (value, index) per [row, chunk], pass 2
// reduces those pairs. Strided (inner > 1): one thread per output column (o, i) walking k in
// order with the CPU's strict "better" test; few long columns are cut into chunks the same way.
#include <cmath>

#include "core/cuda/check.cuh"
#include "kernels/common/cuda/block_reduce.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/max/max.h"

namespace tessera {
namespace cuda {
namespace {

template <class A>
struct Best {
  A v;
  int32_t i;
};

// Whether v replaces the current best in an in-order walk (the CPU's rule).
template <bool kMin, class A>
__device__ __forceinline__ bool better(A v, A best) {
  if (isnan(best)) return false;
  if (isnan(v)) return true;
  return kMin ? v < best : v > best;
}

// The better of two candidates from anywhere in the row: NaN first, then the extreme value,
// ties to the lower index. Commutative and associative, so any tree gives the in-order answer.
template <bool kMin>
struct PickBest {
  template <class A>
  __device__ Best<A> operator()(Best<A> a, Best<A> b) const {
    const bool an = isnan(a.v), bn = isnan(b.v);
    if (an != bn) return an ? a : b;
    if (!an && a.v != b.v) return (kMin ? a.v < b.v : a.v > b.v) ? a : b;
    return a.i <= b.i ? a : b;
  }
};

// Blocks b = (row o, chunk c) over x [rows, n]: the best of x[o, c·chunk .. min(n, (c+1)·chunk)).
// Candidate indices are xi[o, k] when given (pass 2), else k.
template <bool kMin, class T>
__global__ void row_extreme(const T* x, const int32_t* xi, T* y, int32_t* yi, int64_t rows, int64_t n,
                            int64_t chunk, int64_t chunks) {
  using A = acc_t<T>;
  const A worst = kMin ? A(INFINITY) : A(-INFINITY);
  for (int64_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const int64_t o = b / chunks, k0 = (b % chunks) * chunk, k1 = ::min(n, k0 + chunk);
    Best<A> best{worst, INT32_MAX};  // loses to any element (ties: every index is lower)
    for (int64_t k = k0 + threadIdx.x; k < k1; k += blockDim.x) {
      const A v = to_acc(x[o * n + k]);
      const int32_t idx = xi ? xi[o * n + k] : static_cast<int32_t>(k);
      best = PickBest<kMin>{}(best, Best<A>{v, idx});
    }
    best = block_reduce(best, PickBest<kMin>{}, Best<A>{worst, INT32_MAX});
    if (threadIdx.x == 0) {
      y[b] = from_acc<T>(best.v);
      yi[b] = best.i;
    }
  }
}

// Threads t = (o, c, i) over x [outer, n, inner]: the best x[o, k, i] for k in chunk c, in k order.
template <bool kMin, class T>
__global__ void col_extreme(const T* x, const int32_t* xi, T* y, int32_t* yi, int64_t outer, int64_t n,
                            int64_t inner, int64_t chunk, int64_t chunks) {
  using A = acc_t<T>;
  const int64_t total = outer * chunks * inner;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = t % inner, c = (t / inner) % chunks, o = t / (inner * chunks);
    const int64_t k0 = c * chunk, k1 = ::min(n, k0 + chunk);
    const int64_t base = o * n * inner + i;
    A best = to_acc(x[base + k0 * inner]);
    int32_t bi = xi ? xi[base + k0 * inner] : static_cast<int32_t>(k0);
    for (int64_t k = k0 + 1; k < k1; ++k) {
      const A v = to_acc(x[base + k * inner]);
      if (better<kMin>(v, best)) best = v, bi = xi ? xi[base + k * inner] : static_cast<int32_t>(k);
    }
    y[t] = from_acc<T>(best);
    yi[t] = bi;
  }
}

template <bool kMin, class T>
void launch_extreme(const T* x, const int32_t* xi, T* y, int32_t* yi, const DimReducePlan& p, cudaStream_t stream,
                    const char* op) {
  if (p.inner == 1) {
    row_extreme<kMin><<<grid_for_rows(p.outer * p.chunks), threads_for(p.chunk), 0, stream>>>(x, xi, y, yi, p.outer,
                                                                                              p.n, p.chunk, p.chunks);
  } else {
    col_extreme<kMin><<<blocks_for(p.outer * p.chunks * p.inner), 256, 0, stream>>>(x, xi, y, yi, p.outer, p.n,
                                                                                    p.inner, p.chunk, p.chunks);
  }
  TS_CUDA_LAUNCH_CHECK(op);
}

template <bool kMin, class T>
void extreme(const Tensor& x, const Tensor& values, const Tensor& indices, const DimReducePlan& plan, const char* op) {
  const cudaStream_t stream = current_stream(values);
  const T* px = static_cast<const T*>(x.data_ptr());
  T* py = static_cast<T*>(values.data_ptr());
  int32_t* pi = static_cast<int32_t*>(indices.data_ptr());
  if (plan.chunks == 1) return launch_extreme<kMin>(px, static_cast<const int32_t*>(nullptr), py, pi, plan, stream, op);
  // Two passes: the best (value, index) of every chunk [outer, chunks, inner], then of those.
  const int64_t m = plan.outer * plan.chunks * plan.inner;
  Tensor part_v = empty({m}, TensorOptions(values.dtype()).device(values.device()));
  Tensor part_i = empty({m}, TensorOptions(DType::i32).device(values.device()));
  T* pv = static_cast<T*>(part_v.data_ptr());
  int32_t* pidx = static_cast<int32_t*>(part_i.data_ptr());
  launch_extreme<kMin>(px, static_cast<const int32_t*>(nullptr), pv, pidx, plan, stream, op);
  DimReducePlan second = plan;
  second.n = second.chunk = plan.chunks;
  second.chunks = 1;
  launch_extreme<kMin>(static_cast<const T*>(pv), static_cast<const int32_t*>(pidx), py, pi, second, stream, op);
}

}  // namespace

void extreme_along_dim(const Tensor& x, const Tensor& values, const Tensor& indices, int dim, bool take_min) {
  const Shape& s = x.shape();
  const int d = s.normalize_dim(dim);
  const DimReducePlan plan(s.prod(0, d), s[d], s.prod(d + 1, s.ndim()));
  if (plan.outer * plan.inner == 0) return;
  const char* op = take_min ? "min" : "max";
  dispatch_cuda_float(values.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (take_min) {
      extreme<true, T>(x, values, indices, plan, op);
    } else {
      extreme<false, T>(x, values, indices, plan, op);
    }
  });
}

}  // namespace cuda

void op::Max::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  cuda::extreme_along_dim(in[0], out[0], out[1], attrs.dim, false);
}

}  // namespace tessera
