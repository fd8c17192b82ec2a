#include "kernels/sparse_layer_norm/sparse_layer_norm.h"

#include "kernels/common/normalize.h"
#include "kernels/common/normalize_checks.h"
#include "kernels/layer_norm/layer_norm.h"  // detail::layer_norm_stats_dtype
#include "kernels/sparse_layer_norm_backward/sparse_layer_norm_backward.h"

namespace tessera {

Tensor sparse_layer_norm(const Tensor& x, int64_t segments, const Tensor& gamma, const Tensor& beta, double eps,
                         bool relu) {
  std::vector<Tensor> in{x};
  if (gamma.defined()) in.push_back(gamma);
  if (beta.defined()) in.push_back(beta);
  return call<op::SparseLayerNorm>({segments, eps, relu, gamma.defined(), beta.defined()}, in)[0];
}

namespace detail {

Shape sparse_layer_norm_stats_shape(const Shape& x, int64_t segments) {
  std::vector<int64_t> s = x.vec();
  s.back() = segments;
  return Shape(s);
}

void check_segments(const char* op, const TensorMeta& x, int64_t segments) {
  check_norm_input(op, x);
  TS_CHECK(segments >= 1, ValueError, op << ": segments must be >= 1, got " << segments << " for x " << x);
  TS_CHECK(x.shape[-1] % segments == 0, ShapeError,
           op << ": the last dim of x " << x << " (" << x.shape[-1] << ") must be divisible by segments ("
              << segments << ")");
}

}  // namespace detail

std::vector<TensorMeta> op::SparseLayerNorm::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1 + attrs.has_gamma + attrs.has_beta);
  const TensorMeta& x = in[0];
  detail::check_segments(kName, x, attrs.segments);  // x floating with a last dim of whole segments
  detail::check_norm_eps(kName, attrs.eps);
  detail::check_norm_affine(kName, in, 1, attrs.has_gamma, x);
  const TensorMeta stats{detail::sparse_layer_norm_stats_shape(x.shape, attrs.segments),
                         detail::layer_norm_stats_dtype(x.dtype), x.device};
  return {x, stats, stats};
}

void op::SparseLayerNorm::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const int64_t c = in[0].shape()[-1];
  const int64_t nseg = attrs.segments, gs = c / nseg;  // segments per row, features per segment (G)
  const int64_t units = in[0].numel() / gs;            // rows · segments, one statistic each
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = in[0].data<T>();
    const T* gamma = attrs.has_gamma ? in[1].data<T>() : nullptr;
    const T* beta = attrs.has_beta ? in[1 + attrs.has_gamma].data<T>() : nullptr;
    T* y = out[0].data<T>();
    T* mean = out[1].data<T>();  // [rows, S] = [units]
    T* rstd = out[2].data<T>();  // [rows, S]
    // Unit u = (row u / S, segment u % S) owns x[u·G, (u+1)·G) and parameters [(u % S)·G, ...).
#pragma omp parallel for if (units * gs > kParallelGrain)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t p = (u % nseg) * gs;  // offset of the segment's parameters
      // The same normalization as layer_norm (so segments == 1 gives identical bits), then
      // y = max(y, 0) with relu.
      cpu::normalize_group<T>(x + u * gs, y + u * gs, gs, gamma ? gamma + p : nullptr, beta ? beta + p : nullptr,
                              attrs.eps, mean[u], rstd[u]);
      if (attrs.relu) {
        cpu::ArrayMap<T> ys(y + u * gs, gs);
        ys = ys.max(T(0));
      }
    }
  });
}

std::vector<Tensor> op::SparseLayerNorm::backward(const BackwardContext& ctx, const Attrs& attrs) {
  const Tensor gamma = attrs.has_gamma ? ctx.input(1) : Tensor();
  const Tensor y = attrs.relu ? ctx.output(0) : Tensor();
  std::vector<Tensor> d = sparse_layer_norm_backward(ctx.grad_output(0), ctx.input(0), ctx.output(1),
                                                     ctx.output(2), attrs.segments, y, gamma);
  std::vector<Tensor> grads{ctx.needs_input_grad(0) ? d[0] : Tensor()};
  if (attrs.has_gamma) grads.push_back(ctx.needs_input_grad(1) ? d[1] : Tensor());
  if (attrs.has_beta) grads.push_back(ctx.needs_input_grad(1 + attrs.has_gamma) ? d[2] : Tensor());
  return grads;
}

}  // namespace tessera
