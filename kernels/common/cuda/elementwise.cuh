// Elementwise CUDA kernels with numpy broadcasting, for the unary and binary ops.
//
//   cuda::binary_op(a, b, y, [] __device__(auto p, auto q) { return p + q; });   // in acc_t
//   cuda::unary_op(x, y, [] __device__(auto v) { return v > 0 ? v : decltype(v)(0); });
//
// Values are loaded as acc_t<T> (f32 for bf16/f16), combined, and rounded once on store. Same
// shapes take a flat loop; otherwise each output index is decomposed over y's shape and the
// inputs are read through broadcast strides (0 along broadcast dimensions).
#pragma once

#include <cstdint>

#include "core/cuda/check.cuh"
#include "kernels/common/cuda/dtype.cuh"

namespace tessera {
namespace cuda {

constexpr int kMaxDims = 8;

/// y's sizes and, per input, the element stride of each of y's dimensions (0 where broadcast).
struct BroadcastIndex {
  int ndim = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride_a[kMaxDims] = {};
  int64_t stride_b[kMaxDims] = {};

  __device__ void offsets(int64_t i, int64_t& ia, int64_t& ib) const {
    ia = ib = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t k = i % size[d];
      i /= size[d];
      ia += k * stride_a[d];
      ib += k * stride_b[d];
    }
  }
};

/// Strides of `in` (right-aligned against `out`, numpy rules) as BroadcastIndex wants them.
inline void broadcast_strides(const Shape& in, const Shape& out, int64_t* stride) {
  int64_t s = 1;
  for (int d = out.ndim() - 1, k = in.ndim() - 1; d >= 0; --d, --k) {
    const int64_t n = k >= 0 ? in[k] : 1;
    stride[d] = n == 1 ? 0 : s;
    s *= n;
  }
}

template <class T, class F>
__global__ void binary_same_shape(const T* a, const T* b, T* y, int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = from_acc<T>(f(to_acc(a[i]), to_acc(b[i])));
}

template <class T, class F>
__global__ void binary_broadcast(const T* a, const T* b, T* y, int64_t n, BroadcastIndex ix, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t ia, ib;
    ix.offsets(i, ia, ib);
    y[i] = from_acc<T>(f(to_acc(a[ia]), to_acc(b[ib])));
  }
}

template <class T, class F>
__global__ void unary_kernel(const T* x, T* y, int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = from_acc<T>(f(to_acc(x[i])));
}

/// y = f(a, b) with broadcasting; a, b, y of one floating dtype; f a __device__ lambda on acc_t.
template <class F>
void binary_op(const Tensor& a, const Tensor& b, const Tensor& y, const char* op, F f) {
  const int64_t n = y.numel();
  if (n == 0) return;
  TS_CHECK(y.dim() <= kMaxDims, ShapeError, op << ": more than " << kMaxDims << " dimensions");
  dispatch_cuda_float(y.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pa = static_cast<const T*>(a.data_ptr());
    const T* pb = static_cast<const T*>(b.data_ptr());
    T* py = static_cast<T*>(y.data_ptr());
    if (a.shape() == y.shape() && b.shape() == y.shape()) {
      binary_same_shape<<<blocks_for(n), 256, 0, current_stream(y)>>>(pa, pb, py, n, f);
    } else {
      BroadcastIndex ix;
      ix.ndim = y.dim();
      for (int d = 0; d < y.dim(); ++d) ix.size[d] = y.shape()[d];
      broadcast_strides(a.shape(), y.shape(), ix.stride_a);
      broadcast_strides(b.shape(), y.shape(), ix.stride_b);
      binary_broadcast<<<blocks_for(n), 256, 0, current_stream(y)>>>(pa, pb, py, n, ix, f);
    }
  });
}

/// y = f(x) elementwise; x, y of one floating dtype and shape.
template <class F>
void unary_op(const Tensor& x, const Tensor& y, const char* op, F f) {
  const int64_t n = y.numel();
  if (n == 0) return;
  dispatch_cuda_float(y.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_kernel<<<blocks_for(n), 256, 0, current_stream(y)>>>(static_cast<const T*>(x.data_ptr()),
                                                                 static_cast<T*>(y.data_ptr()), n, f);
  });
}

}  // namespace cuda
}  // namespace tessera
