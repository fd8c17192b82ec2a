// Warp- and block-wide reductions in a fixed order, for the row kernels (reductions, softmax,
// cross entropy, layer norms, optimizer sums). No atomics: the shuffle/shared-memory tree is
// the same on every run, so results are bitwise reproducible for a given block size, and
// every block size used here is a function of the shapes only (threads_for).
//
//   A s = 0;
//   for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += to_acc(x[j]);  // fixed strides
//   s = block_reduce(s, SumOp{}, A(0));                                         // every thread gets it
//
// Requirements: blockDim.x is a multiple of 32 (at most 1024) and every thread of the block
// calls block_reduce (it synchronizes). Values may be structs (trivially copyable, a multiple
// of 4 bytes); `op` combines two partial results, the left one from lower threads.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/common/dim_reduce_plan.h"  // DimReducePlan, for the kernels that include this

namespace tessera {
namespace cuda {

constexpr unsigned kFullMask = 0xffffffffu;

/// __shfl_down_sync / __shfl_sync for any trivially copyable value (a float, a double, or a
/// small struct such as (value, index)), moved as 32-bit words.
template <class V>
__device__ __forceinline__ V shfl_down(V v, int delta) {
  static_assert(sizeof(V) % 4 == 0, "shuffled values are made of 32-bit words");
  int w[sizeof(V) / 4];
  memcpy(w, &v, sizeof(V));
  for (int k = 0; k < static_cast<int>(sizeof(V) / 4); ++k) w[k] = __shfl_down_sync(kFullMask, w[k], delta);
  memcpy(&v, w, sizeof(V));
  return v;
}

template <class V>
__device__ __forceinline__ V shfl_from(V v, int src_lane) {
  static_assert(sizeof(V) % 4 == 0, "shuffled values are made of 32-bit words");
  int w[sizeof(V) / 4];
  memcpy(w, &v, sizeof(V));
  for (int k = 0; k < static_cast<int>(sizeof(V) / 4); ++k) w[k] = __shfl_sync(kFullMask, w[k], src_lane);
  memcpy(&v, w, sizeof(V));
  return v;
}

struct SumOp {
  template <class A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
};

/// Tree reduction over the 32 lanes of a warp, op(lower lanes, higher lanes) at every level;
/// lane 0's result is broadcast, so every lane returns the same bits (whatever the op, even one
/// that is not commutative under FMA contraction).
template <class V, class Op>
__device__ __forceinline__ V warp_reduce(V v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, shfl_down(v, o));
  return shfl_from(v, 0);
}

/// Reduction over the whole block: warps reduce, warp leaders meet in shared memory, warp 0
/// reduces their values (padding with `identity`), and the result is broadcast to all threads.
template <class A, class Op>
__device__ A block_reduce(A v, Op op, A identity) {
  __shared__ A partial[32];
  __shared__ A result;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_reduce(v, op);
  if (warps == 1) return v;
  __syncthreads();  // `partial` and `result` may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    A w = lane < warps ? partial[lane] : identity;
    w = warp_reduce(w, op);
    if (lane == 0) result = w;
  }
  __syncthreads();
  return result;
}

template <class A>
__device__ __forceinline__ A block_sum(A v) {
  return block_reduce(v, SumOp{}, A(0));
}

/// Two sums reduced together (one block_reduce instead of two).
template <class A>
struct TwoSums {
  A a, b;
};

struct AddTwoSums {
  template <class A>
  __device__ TwoSums<A> operator()(TwoSums<A> x, TwoSums<A> y) const {
    return {x.a + y.a, x.b + y.b};
  }
};

/// Threads of a block that walks rows of n elements: n rounded up to a warp, at most max_threads.
/// A function of the shape only, so the reduction order (and the result) is too.
inline int threads_for(int64_t n, int max_threads = 256) {
  const int64_t t = ((n < max_threads ? n : max_threads) + 31) / 32 * 32;
  return static_cast<int>(t < 32 ? 32 : t);
}

/// Grid size for `n` independent rows (one block each, grid-stride beyond this).
inline unsigned grid_for_rows(int64_t n) {
  constexpr int64_t kMax = int64_t{1} << 20;
  return static_cast<unsigned>(n < 1 ? 1 : (n > kMax ? kMax : n));
}

}  // namespace cuda
}  // namespace tessera
