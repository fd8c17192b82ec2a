// Argument checks shared by the normalization ops over x's last dim C: layer_norm (one group
// per row), sparse_layer_norm (S groups per row) and their backward ops. Errors name the op and
// the metas involved.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "core/op.h"

namespace tessera {
namespace detail {

/// x is floating with a non-empty last dim.
inline void check_norm_input(const char* op, const TensorMeta& x) {
  check_floating(op, x, "x");
  TS_CHECK(x.shape.ndim() >= 1 && x.shape[-1] > 0, ShapeError,
           op << ": x must have a non-empty last dim to normalize over, got " << x);
}

/// eps is finite and >= 0.
inline void check_norm_eps(const char* op, double eps) {
  TS_CHECK(std::isfinite(eps) && eps >= 0, ValueError, op << ": eps must be >= 0, got " << eps);
}

/// The forward's optional gamma then beta, in[first], in[first + 1] (those present): each [C]
/// in x's dtype.
inline void check_norm_affine(const char* op, const std::vector<TensorMeta>& in, size_t first, bool has_gamma,
                              const TensorMeta& x) {
  const Shape c{x.shape[-1]};
  for (size_t i = first; i < in.size(); ++i) {
    const char* what = (i == first && has_gamma) ? "gamma" : "beta";
    TS_CHECK(in[i].shape == c, ShapeError,
             op << ": " << what << " " << in[i] << " must have shape " << c << " for x " << x);
    TS_CHECK(in[i].dtype == x.dtype, DTypeError,
             op << ": " << what << " " << in[i] << " and x " << x << " differ in dtype");
  }
}

/// The backward's saved mean and rstd are both `stats` (the forward's statistics meta); `for_x`
/// ends the message ("x f32[2, 6]", with the segments where there are some).
inline void check_norm_stats(const char* op, const TensorMeta& mean, const TensorMeta& rstd,
                             const TensorMeta& stats, const std::string& for_x) {
  TS_CHECK(mean == stats && rstd == stats, ShapeError,
           op << ": mean " << mean << " and rstd " << rstd << " must be " << stats << " for " << for_x);
}

/// The backward's gamma is [C] in x's meta; returns that meta (the meta of dgamma and dbeta).
inline TensorMeta check_norm_backward_gamma(const char* op, const std::vector<TensorMeta>& in, size_t index,
                                            bool has_gamma, const TensorMeta& x) {
  const TensorMeta c{Shape{x.shape[-1]}, x.dtype, x.device};
  if (has_gamma)
    TS_CHECK(in[index] == c, ShapeError, op << ": gamma " << in[index] << " must be " << c << " for x " << x);
  return c;
}

}  // namespace detail
}  // namespace tessera
