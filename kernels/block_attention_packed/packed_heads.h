// Host copies between packed projection rows and per-head tensors (the CPU kernels of
// block_attention_packed and its backward): rows [B·T, W] hold `heads` heads of D values from
// column c0; the per-head tensor is [B, heads, T, D]. Parallel over (b, head) when large; each
// element is copied once, so the result does not depend on the schedule.
#pragma once

#include <cstdint>

#include "kernels/common/dispatch.h"  // kParallelGrain

namespace tessera {
namespace packed {

/// dst [B, heads, T, D] = the heads of rows src [B·T, W] from column c0.
template <class T>
void unpack(const T* src, int64_t W, int64_t c0, int64_t B, int64_t heads, int64_t Tn, int64_t D, T* dst) {
#pragma omp parallel for collapse(2) if (B * heads * Tn * D > kParallelGrain)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < Tn; ++t) {
        const T* s = src + (b * Tn + t) * W + c0 + h * D;
        T* d = dst + ((b * heads + h) * Tn + t) * D;
        for (int64_t e = 0; e < D; ++e) d[e] = s[e];
      }
}

/// The heads of rows dst [B·T, W] from column c0 = src [B, heads, T, D].
template <class T>
void pack(const T* src, int64_t B, int64_t heads, int64_t Tn, int64_t D, T* dst, int64_t W, int64_t c0) {
#pragma omp parallel for collapse(2) if (B * heads * Tn * D > kParallelGrain)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < Tn; ++t) {
        const T* s = src + ((b * heads + h) * Tn + t) * D;
        T* d = dst + (b * Tn + t) * W + c0 + h * D;
        for (int64_t e = 0; e < D; ++e) d[e] = s[e];
      }
}

}  // namespace packed
}  // namespace tessera
