// Row statistics of softmax for the GPU kernels of softmax, log_softmax, cross_entropy and
// cross_entropy_backward: the row max m and s = Σ_j exp(x_j − m), found in one read of the row
// ("online softmax": each thread rescales its running sum when its max grows, and partial
// results (m, s) combine as m = max(m1, m2), s = s1·e^(m1−m) + s2·e^(m2−m)).
//
//   MaxSumExp<A> st = row_max_sumexp(x + r * c, c);   // every thread of the block gets it
//   y[j] = exp(x[j] − st.m) / st.s;
#pragma once

#include <cstdint>

#include "kernels/common/cuda/block_reduce.cuh"
#include "kernels/common/cuda/device_math.cuh"
#include "kernels/common/cuda/dtype.cuh"

namespace tessera {
namespace cuda {

template <class A>
struct MaxSumExp {
  A m;  ///< max so far (−inf: none yet)
  A s;  ///< Σ exp(x − m) so far (0: no element yet)
};

/// e^(from − to) for from <= to, with e^0 = 1 when both are the same infinity (an all −inf
/// part then counts like equal values instead of turning into NaN).
template <class A>
__device__ __forceinline__ A rescale(A from, A to) {
  return from == to ? A(1) : dev_exp(from - to);
}

struct CombineMaxSumExp {
  template <class A>
  __device__ MaxSumExp<A> operator()(MaxSumExp<A> a, MaxSumExp<A> b) const {
    if (a.s == A(0)) return b;
    if (b.s == A(0)) return a;
    const A m = a.m > b.m ? a.m : b.m;
    return {m, a.s * rescale(a.m, m) + b.s * rescale(b.m, m)};
  }
};

/// (max, Σ exp(x − max)) of the n elements of `row` in acc_t<T>. Thread t reads elements
/// t, t + blockDim, ... in order; every thread of the block must call it (it synchronizes).
template <class T>
__device__ MaxSumExp<acc_t<T>> row_max_sumexp(const T* row, int64_t n) {
  using A = acc_t<T>;
  MaxSumExp<A> r{A(-INFINITY), A(0)};
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const A v = to_acc(row[j]);
    if (v > r.m) {
      r.s = r.s * rescale(r.m, v) + A(1);
      r.m = v;
    } else {
      r.s += rescale(v, r.m);
    }
  }
  return block_reduce(r, CombineMaxSumExp{}, MaxSumExp<A>{A(-INFINITY), A(0)});
}

}  // namespace cuda
}  // namespace tessera
