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
//
// Mixed f32 / bf16 / f16, for the ops that opt in (an f32 op whose output, or whose incoming
// gradient, is in the autocast dtype):
//   cuda::unary_op_narrowing(x, y, op, f);      // x f32, y bf16/f16: f in f32, rounded once
//   cuda::binary_op_widening(g, x, y, op, f);  // g bf16/f16, x and y f32, one shape
// Bitwise the same as the one-dtype op followed (or preceded) by a cast: widening is exact, and
// both round f's f32 value once to nearest even. Packs of 4 elements on both sides (16 bytes of
// f32, 8 of bf16/f16).
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>

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
// The element types: one T for all three, except binary_op_widening's (TA bf16/f16, TB = TY f32).
template <int N, bool Swap, class TA, class TB, class TY, class F>
__global__ void binary_flat(const TA* full, const TB* part, TY* y, int64_t n, int64_t nb, F f) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t packs = N > 1 ? n / N : 0;
  for (int64_t v = first; v < packs; v += stride) {
    const Pack<TA, N> a = reinterpret_cast<const Pack<TA, N>*>(full)[v];
    const Pack<TB, N> b = reinterpret_cast<const Pack<TB, N>*>(part)[(v * N) % nb / N];
    Pack<TY, N> r;
#pragma unroll
    for (int k = 0; k < N; ++k)
      r.v[k] = Swap ? from_acc<TY>(f(to_acc(b.v[k]), to_acc(a.v[k])))
                    : from_acc<TY>(f(to_acc(a.v[k]), to_acc(b.v[k])));
    reinterpret_cast<Pack<TY, N>*>(y)[v] = r;
  }
  for (int64_t i = packs * N + first; i < n; i += stride) {
    const auto a = to_acc(full[i]), b = to_acc(part[i % nb]);
    y[i] = Swap ? from_acc<TY>(f(b, a)) : from_acc<TY>(f(a, b));
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

// y[i] = f(x[i]), N elements per thread per step; TI = TO, or TI f32 and TO bf16/f16.
template <int N, class TI, class TO, class F>
__global__ void unary_kernel(const TI* x, TO* y, int64_t n, F f) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t packs = N > 1 ? n / N : 0;
  for (int64_t v = first; v < packs; v += stride) {
    const Pack<TI, N> a = reinterpret_cast<const Pack<TI, N>*>(x)[v];
    Pack<TO, N> r;
#pragma unroll
    for (int k = 0; k < N; ++k) r.v[k] = from_acc<TO>(f(to_acc(a.v[k])));
    reinterpret_cast<Pack<TO, N>*>(y)[v] = r;
  }
  for (int64_t i = packs * N + first; i < n; i += stride) y[i] = from_acc<TO>(f(to_acc(x[i])));
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
/// Pack width: the smallest of the three element types' (4 when f32 meets bf16/f16).
template <bool Swap, class TA, class TB, class TY, class F>
void launch_binary_flat(const TA* full, const TB* part, TY* y, int64_t n, int64_t nb, F f, cudaStream_t stream) {
  constexpr int N = std::min({pack_width<TA>(), pack_width<TB>(), pack_width<TY>()});
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

/// Launches unary_kernel: packed (the narrower type's pack width) when the pointers are aligned.
template <class TI, class TO, class F>
void launch_unary(const TI* x, TO* y, int64_t n, F f, cudaStream_t stream) {
  constexpr int N = std::min(pack_width<TI>(), pack_width<TO>());
  if (packable<N>(x, y))
    unary_kernel<N><<<blocks_for(n / N), 256, 0, stream>>>(x, y, n, f);
  else
    unary_kernel<1><<<blocks_for(n), 256, 0, stream>>>(x, y, n, f);
}

/// y = f(x) elementwise; x, y of one floating dtype and shape.
template <class F>
void unary_op(const Tensor& x, const Tensor& y, const char* op, F f) {
  const int64_t n = y.numel();
  if (n == 0) return;
  dispatch_cuda_float(y.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_unary(static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), n, f, current_stream(y));
  });
}

/// Calls f(TypeTag<H>{}), H the CUDA type of `half`, for kernels where f32 data (`wide`) meets a
/// bf16/f16 tensor; DTypeError naming `op` for any other pair.
template <class F>
void dispatch_f32_with_half(DType wide, DType half, const char* op, F&& f) {
  if (wide == DType::f32 && half == DType::bf16) return f(TypeTag<__nv_bfloat16>{});
  if (wide == DType::f32 && half == DType::f16) return f(TypeTag<__half>{});
  TS_THROW(DTypeError, op << ": no CUDA kernel for " << wide << " with " << half << " (mixed: f32 with bf16/f16)");
}

/// y = f(x) elementwise, x and y of one shape: of one floating dtype (unary_op), or x f32 and y
/// bf16/f16 (f in f32, its value rounded once to y's dtype: bitwise unary_op, then a cast).
template <class F>
void unary_op_narrowing(const Tensor& x, const Tensor& y, const char* op, F f) {
  if (x.dtype() == y.dtype()) return unary_op(x, y, op, f);
  const int64_t n = y.numel();
  dispatch_f32_with_half(x.dtype(), y.dtype(), op, [&](auto tag) {
    using H = typename decltype(tag)::type;
    if (n == 0) return;
    launch_unary(static_cast<const float*>(x.data_ptr()), static_cast<H*>(y.data_ptr()), n, f, current_stream(y));
  });
}

/// y = f(a, b) elementwise: a, b, y of one floating dtype (binary_op, broadcasting), or one shape
/// with a bf16/f16 and b, y f32 (a widened exactly: bitwise binary_op on cast(a, f32)).
template <class F>
void binary_op_widening(const Tensor& a, const Tensor& b, const Tensor& y, const char* op, F f) {
  if (a.dtype() == y.dtype() && b.dtype() == y.dtype()) return binary_op(a, b, y, op, f);
  TS_CHECK(a.shape() == y.shape() && b.shape() == y.shape() && b.dtype() == y.dtype(), DTypeError,
           op << ": mixed dtypes need one shape and b, y of one dtype, got a " << a.meta() << ", b " << b.meta()
              << ", y " << y.meta());
  const int64_t n = y.numel();
  dispatch_f32_with_half(y.dtype(), a.dtype(), op, [&](auto tag) {
    using H = typename decltype(tag)::type;
    if (n == 0) return;
    launch_binary_flat<false>(static_cast<const H*>(a.data_ptr()), static_cast<const float*>(b.data_ptr()),
                              static_cast<float*>(y.data_ptr()), n, n, f, current_stream(y));
  });
}

}  // namespace cuda
}  // namespace tessera
