// The per-group normalization shared by layer_norm (one group per row) and sparse_layer_norm
// (`segments` groups per row).
#pragma once

#include <cmath>

#include "kernels/common/array_map.h"

namespace tessera {
namespace cpu {

/// Normalizes one group of n features: y = xhat·gamma + beta (gamma/beta may be null), with
/// xhat = (x − mu)·rstd and rstd = 1/sqrt(var + eps); stores mu and rstd.
/// Shifted two-pass statistics, vectorized by Eigen in T: with k = x_0 and d = x − k,
/// m = mean(d), mu = k + m, var = mean((d − m)²) (biased). Working on d keeps groups with a
/// large common offset (1e4 + N(0,1)) accurate in f32.
template <class T>
void normalize_group(const T* x, T* y, int64_t n, const T* gamma, const T* beta, double eps, T& mean, T& rstd) {
  ConstArrayMap<T> xs(x, n);
  ArrayMap<T> ys(y, n);
  const T k = xs[0];
  const T m = (xs - k).mean();
  const T var = ((xs - k) - m).square().mean();
  const T rs = static_cast<T>(1.0 / std::sqrt(static_cast<double>(var) + eps));
  mean = k + m;
  rstd = rs;
  ys = ((xs - k) - m) * rs;
  if (gamma) ys *= ConstArrayMap<T>(gamma, n);
  if (beta) ys += ConstArrayMap<T>(beta, n);
}

}  // namespace cpu
}  // namespace tessera
