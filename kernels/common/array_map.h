// Vectorized CPU maps through Eigen array expressions (SIMD exp, log, tanh, erf, ...).
// Internal to kernels' .cpp files: it pulls in Eigen, which tessera's public headers do not.
//
//   cpu::array_map<T>(in, out, [](const auto& x) { return x.exp(); });
#pragma once

#include <Eigen/Core>
#include <algorithm>

#include "core/tensor.h"
#include "kernels/common/dispatch.h"

namespace tessera {
namespace cpu {

template <class T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

/// out = f(in) where f maps an Eigen array (a chunk of `in`) to an array expression of the
/// same length. Chunks of 16K elements run on OpenMP threads.
template <class T, class F>
void array_map(const Tensor& in, const Tensor& out, F f) {
  constexpr int64_t kChunk = 16384;
  const T* x = static_cast<const T*>(in.data_ptr());
  T* y = static_cast<T*>(out.data_ptr());
  const int64_t n = out.numel(), chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t off = c * kChunk, len = std::min(kChunk, n - off);
    ArrayMap<T>(y + off, len) = f(ConstArrayMap<T>(x + off, len));
  }
}

/// dx = g * f(x): out = g ⊙ f(x) for a derivative expression f, chunked like array_map.
template <class T, class F>
void array_map_scaled(const Tensor& g, const Tensor& in, const Tensor& out, F f) {
  constexpr int64_t kChunk = 16384;
  const T* pg = static_cast<const T*>(g.data_ptr());
  const T* x = static_cast<const T*>(in.data_ptr());
  T* y = static_cast<T*>(out.data_ptr());
  const int64_t n = out.numel(), chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t off = c * kChunk, len = std::min(kChunk, n - off);
    ArrayMap<T>(y + off, len) = ConstArrayMap<T>(pg + off, len) * f(ConstArrayMap<T>(x + off, len));
  }
}

}  // namespace cpu
}  // namespace tessera
