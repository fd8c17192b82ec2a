#include "kernels/layer_norm_backward/layer_norm_backward.h"

#include <algorithm>

#include "kernels/common/dispatch.h"
#include "kernels/layer_norm/layer_norm.h"

namespace tessera {

std::vector<Tensor> layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean,
                                        const Tensor& rstd, const Tensor& gamma) {
  std::vector<Tensor> in{g, x, mean, rstd};
  if (gamma.defined()) in.push_back(gamma);
  return call<LayerNormBackward>({gamma.defined()}, in);
}

std::vector<TensorMeta> LayerNormBackward::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 4 + attrs.has_gamma);
  const TensorMeta& x = in[1];
  check_floating(kName, x, "x");
  TS_CHECK(x.shape.ndim() >= 1 && x.shape[-1] > 0, ShapeError,
           "layer_norm_backward: x must have a non-empty last dim, got " << x);
  const TensorMeta& g = in[0];
  TS_CHECK(g.shape == x.shape && g.device == x.device, ShapeError,
           "layer_norm_backward: g " << g << " must match x " << x);
  TS_CHECK(g.dtype == x.dtype || (x.dtype == DType::f32 && is_half(g.dtype)), DTypeError,
           "layer_norm_backward: g " << g << " for x " << x << " (x's dtype, or bf16/f16 for f32 x)");
  const TensorMeta stats{detail::layer_norm_stats_shape(x.shape), detail::layer_norm_stats_dtype(x.dtype),
                         x.device};
  TS_CHECK(in[2] == stats && in[3] == stats, ShapeError,
           "layer_norm_backward: mean " << in[2] << " and rstd " << in[3] << " must be " << stats
                                        << " for x " << x);
  const TensorMeta c{Shape{x.shape[-1]}, x.dtype, x.device};
  if (attrs.has_gamma)
    TS_CHECK(in[4] == c, ShapeError,
             "layer_norm_backward: gamma " << in[4] << " must be " << c << " for x " << x);
  return {x, c, c};
}

// A bf16/f16 g arrives widened to f32 (exact) by the op machinery: the f32 kernel as for cast(g, f32).
void LayerNormBackward::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                            const Attrs& attrs) {
  const int64_t c = in[1].shape()[-1];
  const int64_t rows = in[1].numel() / c;
  // dgamma/dbeta are reduced over rows in a fixed number of row blocks, each with its own
  // partial sums, then added in block order: the result does not depend on thread count.
  const int64_t nblocks = std::min<int64_t>(rows, 64);
  const int64_t per_block = nblocks > 0 ? (rows + nblocks - 1) / nblocks : 0;
  std::vector<double> partial(static_cast<size_t>(nblocks * 2 * c), 0.0);  // [nblocks, 2, C]
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = in[0].data<T>();
    const T* x = in[1].data<T>();
    const T* mean = in[2].data<T>();
    const T* rstd = in[3].data<T>();
    const T* gamma = attrs.has_gamma ? in[4].data<T>() : nullptr;
    T* dx = out[0].data<T>();
#pragma omp parallel for if (rows * c > kParallelGrain)
    for (int64_t b = 0; b < nblocks; ++b) {
      double* dgamma_b = partial.data() + b * 2 * c;
      double* dbeta_b = dgamma_b + c;
      for (int64_t r = b * per_block; r < std::min(rows, (b + 1) * per_block); ++r) {
        const T* gr = g + r * c;
        const T* xr = x + r * c;
        const double mu = mean[r], rs = rstd[r];
        // term sums: mean_C(gh) and mean_C(gh · xhat), in double.
        double sum_gh = 0, sum_gh_xhat = 0;
        for (int64_t j = 0; j < c; ++j) {
          const double xhat = (xr[j] - mu) * rs;
          const double gh = gamma ? static_cast<double>(gr[j]) * gamma[j] : static_cast<double>(gr[j]);
          sum_gh += gh;
          sum_gh_xhat += gh * xhat;
          dgamma_b[j] += gr[j] * xhat;
          dbeta_b[j] += gr[j];
        }
        const double m_gh = sum_gh / static_cast<double>(c), m_gh_xhat = sum_gh_xhat / static_cast<double>(c);
        // dx = rstd · (gh − mean(gh) − xhat · mean(gh · xhat))
        for (int64_t j = 0; j < c; ++j) {
          const double xhat = (xr[j] - mu) * rs;
          const double gh = gamma ? static_cast<double>(gr[j]) * gamma[j] : static_cast<double>(gr[j]);
          dx[r * c + j] = static_cast<T>(rs * (gh - m_gh - xhat * m_gh_xhat));
        }
      }
    }
    T* dgamma = out[1].data<T>();
    T* dbeta = out[2].data<T>();
    for (int64_t j = 0; j < c; ++j) {
      double sg = 0, sb = 0;
      for (int64_t b = 0; b < nblocks; ++b) {
        sg += partial[b * 2 * c + j];
        sb += partial[b * 2 * c + c + j];
      }
      dgamma[j] = static_cast<T>(sg);
      dbeta[j] = static_cast<T>(sb);
    }
  });
}

}  // namespace tessera
