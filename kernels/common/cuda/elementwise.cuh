// Elementwise CUDA kernels with numpy broadcasting, for the unary and binary ops.
//
//   cuda::binary_op(a, b, y, [] __device__(auto p, auto q) { return p + q; });   // in acc_t
//   cuda::unary_op(x, y, [] __device__(auto v) { return v > 0 ? v : decltype(v)(0); });
//
// Values are loaded as acc_t<T> (f32 for bf16/f16), combined, and rounded once on store. Same
// shapes take a flat loop, and so does one operand broadcast along leading dimensions only (a
// bias [C] against [N, C]: element i reads it at i mod C); both move pack_width<T>() elements per
// thread with vector loads when the pointers allow. Other broadcasts decompose each output index
// over y's shape and read the inputs through broadcast strides (0 along broadcast dimensions).
#pragma once

#include <cstdint>

#include "core/cuda/check.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/vectorized.cuh"

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

// Flat loops, N elements per thread per step: y[i] = f(a[i], b[i mod nb]) with nb = n for the
// same shape, or the length of an operand broadcast along leading dimensions (swap = true: that
// operand is a, i.e. y[i] = f(a[i mod na], b[i])). Packed: N divides nb and every pointer is
// aligned, so a pack of the short operand never wraps.
template <int N, bool Swap, class T, class F>
__global__ void binary_flat(const T* full, const T* part, T* y, int64_t n, int64_t nb, F f) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t packs = N > 1 ? n / N : 0;
  for (int64_t v = first; v < packs; v += stride) {
    const Pack<T, N> a = reinterpret_cast<const Pack<T, N>*>(full)[v];
    const Pack<T, N> b = reinterpret_cast<const Pack<T, N>*>(part)[(v * N) % nb / N];
    Pack<T, N> r;
#pragma unroll
    for (int k = 0; k < N; ++k)
      r.v[k] = Swap ? from_acc<T>(f(to_acc(b.v[k]), to_acc(a.v[k]))) : from_acc<T>(f(to_acc(a.v[k]), to_acc(b.v[k])));
    reinterpret_cast<Pack<T, N>*>(y)[v] = r;
  }
  for (int64_t i = packs * N + first; i < n; i += stride) {
    const auto a = to_acc(full[i]), b = to_acc(part[i % nb]);
    y[i] = Swap ? from_acc<T>(f(b, a)) : from_acc<T>(f(a, b));
  }
}

template <class T, class F>
__global__ void binary_broadcast(const T* a, const T* b, T* y, int64_t n, BroadcastIndex ix, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t ia, ib;
    ix.offsets(i, ia, ib);
    y[i] = from_acc<T>(f(to_acc(a[ia]), to_acc(b[ib])));
  }
}

template <int N, class T, class F>
__global__ void unary_kernel(const T* x, T* y, int64_t n, F f) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t packs = N > 1 ? n / N : 0;
  for (int64_t v = first; v < packs; v += stride) {
    const Pack<T, N> a = reinterpret_cast<const Pack<T, N>*>(x)[v];
    Pack<T, N> r;
#pragma unroll
    for (int k = 0; k < N; ++k) r.v[k] = from_acc<T>(f(to_acc(a.v[k])));
    reinterpret_cast<Pack<T, N>*>(y)[v] = r;
  }
  for (int64_t i = packs * N + first; i < n; i += stride) y[i] = from_acc<T>(f(to_acc(x[i])));
}

/// Whether `part` broadcasts against `out` along leading dimensions only: its shape, without
/// leading 1s, equals out's trailing dimensions (a bias [C] or [1, C] against [N, C]).
inline bool leading_broadcast(const Shape& part, const Shape& out) {
  int k = 0;
  while (k < part.ndim() && part[k] == 1) ++k;
  const int rest = part.ndim() - k;
  if (rest > out.ndim()) return false;
  for (int j = 0; j < rest; ++j)
    if (part[k + j] != out[out.ndim() - rest + j]) return false;
  return true;
}

/// Launches binary_flat: packed when nb is a multiple of the pack and the pointers are aligned.
template <bool Swap, class T, class F>
void launch_binary_flat(const T* full, const T* part, T* y, int64_t n, int64_t nb, F f, cudaStream_t stream) {
  constexpr int N = pack_width<T>();
  if (nb % N == 0 && packable<N>(full, part, y))
    binary_flat<N, Swap><<<blocks_for(n / N), 256, 0, stream>>>(full, part, y, n, nb, f);
  else
    binary_flat<1, Swap><<<blocks_for(n), 256, 0, stream>>>(full, part, y, n, nb, f);
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
    const cudaStream_t stream = current_stream(y);
    if (a.shape() == y.shape() && (b.shape() == y.shape() || leading_broadcast(b.shape(), y.shape()))) {
      launch_binary_flat<false>(pa, pb, py, n, b.numel(), f, stream);
    } else if (b.shape() == y.shape() && leading_broadcast(a.shape(), y.shape())) {
      launch_binary_flat<true>(pb, pa, py, n, a.numel(), f, stream);
    } else {
      BroadcastIndex ix;
      ix.ndim = y.dim();
      for (int d = 0; d < y.dim(); ++d) ix.size[d] = y.shape()[d];
      broadcast_strides(a.shape(), y.shape(), ix.stride_a);
      broadcast_strides(b.shape(), y.shape(), ix.stride_b);
      binary_broadcast<<<blocks_for(n), 256, 0, stream>>>(pa, pb, py, n, ix, f);
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
    constexpr int N = pack_width<T>();
    const T* px = static_cast<const T*>(x.data_ptr());
    T* py = static_cast<T*>(y.data_ptr());
    if (packable<N>(px, py))
      unary_kernel<N><<<blocks_for(n / N), 256, 0, current_stream(y)>>>(px, py, n, f);
    else
      unary_kernel<1><<<blocks_for(n), 256, 0, current_stream(y)>>>(px, py, n, f);
  });
}

}  // namespace cuda
}  // namespace tessera
