#include "kernels/layer_norm_backward/layer_norm_backward.h"

#include "kernels/common/dispatch.h"
#include "kernels/common/normalize.h"
#include "kernels/common/normalize_checks.h"
#include "kernels/common/normalize_param_grads.h"
#include "kernels/layer_norm/layer_norm.h"

namespace tessera {

std::vector<Tensor> layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean,
                                        const Tensor& rstd, const Tensor& gamma) {
  std::vector<Tensor> in{g, x, mean, rstd};
  if (gamma.defined()) in.push_back(gamma);
  return call<op::LayerNormBackward>({gamma.defined()}, in);
}

std::vector<TensorMeta> op::LayerNormBackward::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 4 + attrs.has_gamma);
  const TensorMeta& x = in[1];
  detail::check_norm_input(kName, x);
  const TensorMeta& g = in[0];
  TS_CHECK(g.shape == x.shape && g.device == x.device, ShapeError,
           "layer_norm_backward: g " << g << " must match x " << x);
  TS_CHECK(g.dtype == x.dtype || (x.dtype == DType::f32 && is_half(g.dtype)), DTypeError,
           "layer_norm_backward: g " << g << " for x " << x << " (x's dtype, or bf16/f16 for f32 x)");
  const TensorMeta stats{detail::layer_norm_stats_shape(x.shape), detail::layer_norm_stats_dtype(x.dtype),
                         x.device};
  detail::check_norm_stats(kName, in[2], in[3], stats, "x " + x.str());
  const TensorMeta c = detail::check_norm_backward_gamma(kName, in, 4, attrs.has_gamma, x);
  return {x, c, c};
}

// A bf16/f16 g arrives widened to f32 (exact) by the op machinery: the f32 kernel as for cast(g, f32).
void op::LayerNormBackward::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                            const Attrs& attrs) {
  const int64_t c = in[1].shape()[-1];
  const int64_t rows = in[1].numel() / c;
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = in[0].data<T>();
    const T* x = in[1].data<T>();
    const T* mean = in[2].data<T>();
    const T* rstd = in[3].data<T>();
    const T* gamma = attrs.has_gamma ? in[4].data<T>() : nullptr;
    T* dx = out[0].data<T>();
    // Rows [r0, r1): dx, and their g·xhat and g added into the block's dgamma_b, dbeta_b [C].
    auto block_rows = [&](int64_t r0, int64_t r1, double* dgamma_b, double* dbeta_b) {
      for (int64_t r = r0; r < r1; ++r)
        cpu::normalize_group_backward<T>(g + r * c, x + r * c, c, mean[r], rstd[r], gamma, dx + r * c, dgamma_b,
                                         dbeta_b);
    };
    // dgamma/dbeta [C]: the deterministic row-block reduction of kernels/common/normalize_param_grads.h.
    cpu::reduce_norm_param_grads<T>(rows, c, out[1].data<T>(), out[2].data<T>(), block_rows);
  });
}

}  // namespace tessera
