// What the two Adafactor update ops (adafactor_update, adafactor_factored_update) share: the
// hyperparameters, their checks, the β2 schedule, the step size, and deterministic sums.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/shape.h"
#include "kernels/common/dispatch.h"

namespace tessera {

/// Adafactor hyperparameters (Shazeer & Stern 2018, with the defaults of its reference code).
struct AdafactorAttrs {
  double eps1 = 1e-30;            ///< added to g² before the second-moment averages
  double eps2 = 1e-3;             ///< floor of RMS(p) when the step scales with the parameter
  double clip_threshold = 1.0;    ///< d: the update u is divided by max(1, RMS(u)/d)
  double decay_rate = -0.8;       ///< β2_t = 1 - t^decay_rate
  double weight_decay = 0.0;      ///< decoupled: p -= α·wd·p
  bool relative_step = false;     ///< step size ρ_t = min(1e-2, 1/sqrt(t)) instead of lr
  bool scale_parameter = false;   ///< step size multiplied by max(eps2, RMS(p))
};

namespace detail {

/// ValueError unless eps1, eps2 >= 0, clip_threshold > 0, decay_rate <= 0, weight_decay >= 0
/// (all finite); messages name `op`.
inline void check_adafactor_attrs(const char* op, const AdafactorAttrs& a) {
  TS_CHECK(std::isfinite(a.eps1) && a.eps1 >= 0, ValueError, op << ": eps1 must be finite and >= 0, got " << a.eps1);
  TS_CHECK(std::isfinite(a.eps2) && a.eps2 >= 0, ValueError, op << ": eps2 must be finite and >= 0, got " << a.eps2);
  TS_CHECK(std::isfinite(a.clip_threshold) && a.clip_threshold > 0, ValueError,
           op << ": clip_threshold must be finite and > 0, got " << a.clip_threshold);
  TS_CHECK(std::isfinite(a.decay_rate) && a.decay_rate <= 0, ValueError,
           op << ": decay_rate must be finite and <= 0 (beta2_t = 1 - t^decay_rate), got " << a.decay_rate);
  TS_CHECK(std::isfinite(a.weight_decay) && a.weight_decay >= 0, ValueError,
           op << ": weight_decay must be finite and >= 0, got " << a.weight_decay);
}

/// The factored state's shape for a parameter [..., n, m]: [..., n + m] (row averages, then
/// column averages, per trailing matrix).
inline Shape adafactor_factored_shape(const Shape& p) {
  std::vector<int64_t> v = p.vec();
  v.back() += v[v.size() - 2];
  v.erase(v.end() - 2);
  return Shape(v);
}

/// β2_t = 1 - t^decay_rate (0 at t = 1: the first average is g² + eps1 itself).
inline double adafactor_beta2(double t, double decay_rate) { return 1.0 - std::pow(t, decay_rate); }

/// The step size α_t: (relative_step ? min(1e-2, 1/sqrt(t)) : lr) · (scale_parameter ?
/// max(eps2, RMS(p)) : 1).
inline double adafactor_alpha(const AdafactorAttrs& a, double lr, double t, double rms_p) {
  const double rho = a.relative_step ? std::min(1e-2, 1.0 / std::sqrt(t)) : lr;
  return a.scale_parameter ? rho * std::max(a.eps2, rms_p) : rho;
}

/// Σ_{k < n} f(k) in double, summed per fixed chunk (in parallel) and then over chunks in
/// order: the same result whatever the thread count. `cost`: elements one f(k) reads.
template <class F>
double chunked_sum(int64_t n, F f, int64_t cost = 1) {
  const int64_t chunk = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, cost));
  const int64_t chunks = (n + chunk - 1) / chunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#ifdef _OPENMP  // also included by the CUDA kernels, which nvcc compiles without OpenMP
#pragma omp parallel for if (n * cost > kParallelGrain)
#endif
  for (int64_t c = 0; c < chunks; ++c) {
    double acc = 0;
    const int64_t end = std::min(n, (c + 1) * chunk);
    for (int64_t k = c * chunk; k < end; ++k) acc += f(k);
    partial[static_cast<size_t>(c)] = acc;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace detail
}  // namespace tessera
