// CPU loops shared by elementwise ops: a unary map, and a binary map with numpy broadcasting.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "kernels/common/dispatch.h"

namespace tessera {
namespace cpu {

/// out[i] = f(in[i]) over contiguous tensors of the same numel.
template <class T, class U, class F>
void unary_map(const Tensor& in, const Tensor& out, F f) {
  const T* x = static_cast<const T*>(in.data_ptr());
  U* y = static_cast<U*>(out.data_ptr());
  const int64_t n = out.numel();
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

/// Strides (in elements) of `s` seen from broadcast shape `out`: 0 where s has size 1 or
/// is missing (leading dims), so one index walks both.
std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& out);

/// out = f(a, b) with numpy broadcasting; out has the broadcast shape.
template <class T, class U, class F>
void binary_map(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  U* po = static_cast<U*>(out.data_ptr());
  const int64_t n = out.numel();
  if (a.shape() == out.shape() && b.shape() == out.shape()) {
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
    return;
  }
  if (b.numel() == 1 && a.shape() == out.shape()) {
    const T vb = pb[0];
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], vb);
    return;
  }
  // General case: rows of the last output dim, with per-operand strides (0 = broadcast).
  const Shape& os = out.shape();
  const int nd = os.ndim();
  if (n == 0) return;
  std::vector<int64_t> sa = broadcast_strides(a.shape(), os), sb = broadcast_strides(b.shape(), os);
  const int64_t inner = nd ? os[nd - 1] : 1;
  const int64_t ia = nd ? sa[nd - 1] : 0, ib = nd ? sb[nd - 1] : 0;
  const int64_t rows = n / inner;
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    // Decompose the row index into outer coordinates to find each operand's offset.
    int64_t rem = r, oa = 0, ob = 0;
    for (int d = nd - 2; d >= 0; --d) {
      int64_t c = rem % os[d];
      rem /= os[d];
      oa += c * sa[d];
      ob += c * sb[d];
    }
    U* y = po + r * inner;
    for (int64_t j = 0; j < inner; ++j) y[j] = f(pa[oa + j * ia], pb[ob + j * ib]);
  }
}

/// out = in broadcast to out's shape (numpy rules).
template <class T>
void broadcast_copy(const Tensor& in, const Tensor& out) {
  const T* x = static_cast<const T*>(in.data_ptr());
  T* y = static_cast<T*>(out.data_ptr());
  const Shape& os = out.shape();
  const int nd = os.ndim();
  const int64_t n = out.numel();
  if (n == 0) return;
  std::vector<int64_t> sx = broadcast_strides(in.shape(), os);
  const int64_t inner = nd ? os[nd - 1] : 1, ix = nd ? sx[nd - 1] : 0;
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t r = 0; r < n / inner; ++r) {
    int64_t rem = r, ox = 0;
    for (int d = nd - 2; d >= 0; --d) {
      ox += (rem % os[d]) * sx[d];
      rem /= os[d];
    }
    for (int64_t j = 0; j < inner; ++j) y[r * inner + j] = x[ox + j * ix];
  }
}

}  // namespace cpu
}  // namespace tessera
