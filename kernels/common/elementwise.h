// CPU loops shared by elementwise ops: a unary map, and maps with numpy broadcasting.
#pragma once

#include <array>
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

/// The walk every broadcasting kernel shares. K operands are broadcast against output shape
/// `out`; the output is visited one row of its last dim at a time (rows in parallel), and
/// `row(r, offsets, steps)` is called with the row index r, each operand's element offset at
/// the row's start, and each operand's stride along the last dim (0 where broadcast).
/// Output element j of row r is out[r * out[-1] + j] and reads operand k at offsets[k] + j * steps[k].
template <size_t K, class Row>
void for_each_broadcast_row(const Shape& out, const std::array<Shape, K>& operands, Row row) {
  const int nd = out.ndim();
  const int64_t n = out.numel();
  if (n == 0) return;
  std::array<std::vector<int64_t>, K> st;
  std::array<int64_t, K> steps{};
  for (size_t k = 0; k < K; ++k) {
    st[k] = broadcast_strides(operands[k], out);
    steps[k] = nd ? st[k][nd - 1] : 0;
  }
  const int64_t inner = nd ? out[nd - 1] : 1;
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t r = 0; r < n / inner; ++r) {
    // Decompose the row index into outer coordinates to find each operand's offset.
    std::array<int64_t, K> offsets{};
    int64_t rem = r;
    for (int d = nd - 2; d >= 0; --d) {
      const int64_t c = rem % out[d];
      rem /= out[d];
      for (size_t k = 0; k < K; ++k) offsets[k] += c * st[k][d];
    }
    row(r, offsets, steps);
  }
}

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
  const Shape& os = out.shape();
  const int64_t inner = os.ndim() ? os[os.ndim() - 1] : 1;
  for_each_broadcast_row<2>(os, {a.shape(), b.shape()}, [&](int64_t r, const auto& o, const auto& st) {
    U* y = po + r * inner;
    for (int64_t j = 0; j < inner; ++j) y[j] = f(pa[o[0] + j * st[0]], pb[o[1] + j * st[1]]);
  });
}

/// out = in broadcast to out's shape (numpy rules).
template <class T>
void broadcast_copy(const Tensor& in, const Tensor& out) {
  const T* x = static_cast<const T*>(in.data_ptr());
  T* y = static_cast<T*>(out.data_ptr());
  const Shape& os = out.shape();
  const int64_t inner = os.ndim() ? os[os.ndim() - 1] : 1;
  for_each_broadcast_row<1>(os, {in.shape()}, [&](int64_t r, const auto& o, const auto& st) {
    for (int64_t j = 0; j < inner; ++j) y[r * inner + j] = x[o[0] + j * st[0]];
  });
}

}  // namespace cpu
}  // namespace tessera
