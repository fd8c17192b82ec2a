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

/// Backward of one group of n features from its output gradient g, x, and the saved mu and rstd
/// (gamma may be null), in double: with xhat = (x − mu)·rstd and gh = g·gamma,
///   dx = rstd · (gh − mean(gh) − xhat · mean(gh · xhat)),
/// and adds the group's g·xhat and g into dgamma_part, dbeta_part [n] (a row block's sums of
/// reduce_norm_param_grads).
template <class T>
void normalize_group_backward(const T* g, const T* x, int64_t n, double mu, double rs, const T* gamma, T* dx,
                              double* dgamma_part, double* dbeta_part) {
  double sum_gh = 0, sum_gh_xhat = 0;  // n·mean(gh), n·mean(gh · xhat)
  for (int64_t j = 0; j < n; ++j) {
    const double xhat = (x[j] - mu) * rs;
    const double gh = gamma ? static_cast<double>(g[j]) * gamma[j] : static_cast<double>(g[j]);
    sum_gh += gh;
    sum_gh_xhat += gh * xhat;
    dgamma_part[j] += g[j] * xhat;
    dbeta_part[j] += g[j];
  }
  const double m_gh = sum_gh / static_cast<double>(n), m_gh_xhat = sum_gh_xhat / static_cast<double>(n);
  for (int64_t j = 0; j < n; ++j) {
    const double xhat = (x[j] - mu) * rs;
    const double gh = gamma ? static_cast<double>(g[j]) * gamma[j] : static_cast<double>(g[j]);
    dx[j] = static_cast<T>(rs * (gh - m_gh - xhat * m_gh_xhat));
  }
}

}  // namespace cpu
}  // namespace tessera
