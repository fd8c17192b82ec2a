#include "kernels/layer_norm/layer_norm.h"

#include "kernels/common/normalize.h"
#include "kernels/common/normalize_checks.h"
#include "kernels/layer_norm_backward/layer_norm_backward.h"

namespace tessera {

namespace {

Tensor layer_norm_to(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                     std::optional<DType> out) {
  std::vector<Tensor> in{x};
  if (gamma.defined()) in.push_back(gamma);
  if (beta.defined()) in.push_back(beta);
  return call<op::LayerNorm>({eps, gamma.defined(), beta.defined(), out}, in)[0];
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  return layer_norm_to(x, gamma, beta, eps, std::nullopt);
}

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, DType out) {
  return layer_norm_to(x, gamma, beta, eps, out);
}

namespace detail {
Shape layer_norm_stats_shape(const Shape& x) {
  std::vector<int64_t> rows = x.vec();
  rows.pop_back();
  return Shape(rows);
}
}  // namespace detail

std::vector<TensorMeta> op::LayerNorm::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1 + attrs.has_gamma + attrs.has_beta);
  const TensorMeta& x = in[0];
  detail::check_norm_input(kName, x);
  detail::check_norm_eps(kName, attrs.eps);
  detail::check_norm_affine(kName, in, 1, attrs.has_gamma, x);
  const DType out = attrs.out.value_or(x.dtype);
  TS_CHECK(out == x.dtype || (x.dtype == DType::f32 && is_half(out)), DTypeError,
           "layer_norm: output dtype " << out << " for x " << x << " (x's dtype, or bf16/f16 for f32 x)");
  const TensorMeta stats{detail::layer_norm_stats_shape(x.shape), detail::layer_norm_stats_dtype(x.dtype),
                         x.device};
  return {TensorMeta{x.shape, out, x.device}, stats, stats};
}

// A bf16/f16 y arrives as an f32 buffer (rounded once by the op machinery), like x.
void op::LayerNorm::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const int64_t c = in[0].shape()[-1];
  const int64_t rows = in[0].numel() / c;
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = in[0].data<T>();
    const T* gamma = attrs.has_gamma ? in[1].data<T>() : nullptr;
    const T* beta = attrs.has_beta ? in[1 + attrs.has_gamma].data<T>() : nullptr;
    T* y = out[0].data<T>();
    T* mean = out[1].data<T>();  // [rows]
    T* rstd = out[2].data<T>();  // [rows]
#pragma omp parallel for if (rows * c > kParallelGrain)
    for (int64_t r = 0; r < rows; ++r)
      cpu::normalize_group<T>(x + r * c, y + r * c, c, gamma, beta, attrs.eps, mean[r], rstd[r]);
  });
}

std::vector<Tensor> op::LayerNorm::backward(const BackwardContext& ctx, const Attrs& attrs) {
  const Tensor gamma = attrs.has_gamma ? ctx.input(1) : Tensor();
  std::vector<Tensor> d =
      layer_norm_backward(ctx.grad_output(0), ctx.input(0), ctx.output(1), ctx.output(2), gamma);
  std::vector<Tensor> grads{d[0]};
  if (attrs.has_gamma) grads.push_back(d[1]);
  if (attrs.has_beta) grads.push_back(d[2]);
  return grads;
}

}  // namespace tessera
