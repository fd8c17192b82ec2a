#include "kernels/sparse_layer_norm_backward/sparse_layer_norm_backward.h"

#include <string>

#include "kernels/common/array_map.h"
#include "kernels/common/normalize_checks.h"
#include "kernels/common/normalize_param_grads.h"
#include "kernels/layer_norm/layer_norm.h"  // detail::layer_norm_stats_dtype
#include "kernels/sparse_layer_norm/sparse_layer_norm.h"

namespace tessera {

std::vector<Tensor> sparse_layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean,
                                               const Tensor& rstd, int64_t segments, const Tensor& y,
                                               const Tensor& gamma) {
  std::vector<Tensor> in{g, x, mean, rstd};
  if (y.defined()) in.push_back(y);
  if (gamma.defined()) in.push_back(gamma);
  return call<op::SparseLayerNormBackward>({segments, y.defined(), gamma.defined()}, in);
}

std::vector<TensorMeta> op::SparseLayerNormBackward::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 4 + attrs.relu + attrs.has_gamma);
  const TensorMeta& x = in[1];
  detail::check_segments(kName, x, attrs.segments);  // x floating with a last dim of whole segments
  TS_CHECK(in[0] == x, ShapeError, "sparse_layer_norm_backward: g " << in[0] << " must match x " << x);
  const TensorMeta stats{detail::sparse_layer_norm_stats_shape(x.shape, attrs.segments),
                         detail::layer_norm_stats_dtype(x.dtype), x.device};
  detail::check_norm_stats(kName, in[2], in[3], stats,
                           "x " + x.str() + " and " + std::to_string(attrs.segments) + " segments");
  if (attrs.relu)
    TS_CHECK(in[4] == x, ShapeError, "sparse_layer_norm_backward: y " << in[4] << " must match x " << x);
  const TensorMeta c = detail::check_norm_backward_gamma(kName, in, 4 + attrs.relu, attrs.has_gamma, x);
  return {x, c, c};
}

void op::SparseLayerNormBackward::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                  const Attrs& attrs) {
  using ArrayD = Eigen::Array<double, Eigen::Dynamic, 1>;
  const int64_t c = in[1].shape()[-1];
  const int64_t nseg = attrs.segments, gs = c / nseg;  // segments per row, features per segment (G)
  const int64_t rows = in[1].numel() / c;
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = in[0].data<T>();
    const T* x = in[1].data<T>();
    const T* mean = in[2].data<T>();  // [rows, S]
    const T* rstd = in[3].data<T>();  // [rows, S]
    const T* y = attrs.relu ? in[4].data<T>() : nullptr;
    const T* gamma = attrs.has_gamma ? in[4 + attrs.relu].data<T>() : nullptr;
    T* dx = out[0].data<T>();
    // Rows [r0, r1): dx, and their g·xhat and g added into the block's dgamma_b, dbeta_b [C].
    auto block_rows = [&](int64_t r0, int64_t r1, double* dgamma_b, double* dbeta_b) {
      ArrayD xh(gs), gz(gs), gh(gs);  // one segment's xhat, gz, gh, in double
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t s = 0; s < nseg; ++s) {
          const int64_t u = r * nseg + s, off = u * gs, p = s * gs;  // statistic, data, parameter offsets
          const double mu = mean[u], rs = rstd[u];
          xh = (cpu::ConstArrayMap<T>(x + off, gs).template cast<double>() - mu) * rs;
          gz = cpu::ConstArrayMap<T>(g + off, gs).template cast<double>();
          // ReLU first: the gradient reaches z only where y = max(z, 0) > 0.
          if (y) gz = (cpu::ConstArrayMap<T>(y + off, gs) > T(0)).select(gz, 0.0);
          if (gamma)
            gh = gz * cpu::ConstArrayMap<T>(gamma + p, gs).template cast<double>();
          else
            gh = gz;
          // term 2: subtract mean_G(gh); term 3: subtract xhat · mean_G(gh · xhat); then scale by rstd.
          const double m_gh = gh.mean(), m_gh_xh = (gh * xh).mean();
          cpu::ArrayMap<T>(dx + off, gs) = (rs * (gh - m_gh - xh * m_gh_xh)).template cast<T>();
          Eigen::Map<ArrayD>(dgamma_b + p, gs) += gz * xh;
          Eigen::Map<ArrayD>(dbeta_b + p, gs) += gz;
        }
      }
    };
    // dgamma/dbeta [C]: the deterministic row-block reduction of kernels/common/normalize_param_grads.h.
    cpu::reduce_norm_param_grads<T>(rows, c, out[1].data<T>(), out[2].data<T>(), block_rows);
  });
}

}  // namespace tessera
