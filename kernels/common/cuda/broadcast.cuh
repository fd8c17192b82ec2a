// Numpy broadcasting of K operands against an output shape, for kernels with more (or other)
// operands than cuda::binary_op takes: where (cond, a, b), masked_fill (mask), expand (x),
// compare (a, b into a u8 output).
//
//   const auto ix = cuda::make_broadcast<3>(y.shape(), {c.shape(), a.shape(), b.shape()});
//   ... in a kernel, for output element i:  int64_t o[3]; ix.offsets(i, o);  // a[o[1]], ...
#pragma once

#include <array>
#include <cstdint>

#include "kernels/common/cuda/elementwise.cuh"

namespace tessera {
namespace cuda {

/// The output's sizes and, per operand, the element stride of each output dimension (0 where
/// that operand is broadcast). Passed to kernels by value.
template <int K>
struct BroadcastN {
  int ndim = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[K][kMaxDims] = {};

  /// Element offsets into each operand of output element i (row-major over size).
  __device__ void offsets(int64_t i, int64_t (&off)[K]) const {
    for (int k = 0; k < K; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t c = i % size[d];
      i /= size[d];
      for (int k = 0; k < K; ++k) off[k] += c * stride[k][d];
    }
  }
};

/// The BroadcastN of operands `in` (each broadcastable to `out`, checked by the op's shape rule).
template <int K>
BroadcastN<K> make_broadcast(const Shape& out, const std::array<Shape, K>& in, const char* op) {
  TS_CHECK(out.ndim() <= kMaxDims, ShapeError, op << ": more than " << kMaxDims << " dimensions");
  BroadcastN<K> ix;
  ix.ndim = out.ndim();
  for (int d = 0; d < out.ndim(); ++d) ix.size[d] = out[d];
  for (int k = 0; k < K; ++k) broadcast_strides(in[k], out, ix.stride[k]);
  return ix;
}

}  // namespace cuda
}  // namespace tessera
