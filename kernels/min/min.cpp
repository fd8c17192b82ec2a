#include "kernels/min/min.h"

#include "kernels/max/max.h"
#include "kernels/max_backward/max_backward.h"
#include "kernels/reshape/reshape.h"

namespace tessera {

Tensor min(const Tensor& x) {
  TS_CHECK(x.numel() > 0, ShapeError, "min: tensor " << x.meta() << " is empty");
  return min(reshape(x, std::vector<int64_t>{x.numel()}), 0, false);
}

Tensor min(const Tensor& x, int dim, bool keepdim) { return call<op::Min>({dim, keepdim}, {x})[0]; }

Tensor argmin(const Tensor& x, int dim, bool keepdim) {
  NoGradGuard no_grad;  // indices only: no node for the values output
  return call<op::Min>({dim, keepdim}, {x})[1];
}

std::vector<TensorMeta> op::Min::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  return detail::infer_extreme(kName, in, attrs.dim, attrs.keepdim);
}

void op::Min::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  cpu::extreme_along_dim(in[0], out[0], out[1], attrs.dim, true);
}

std::vector<Tensor> op::Min::backward(const BackwardContext& ctx, const Attrs& attrs) {
  return {max_backward(ctx.grad_output(0), ctx.output(1), ctx.input_meta(0).shape, attrs.dim)};
}

}  // namespace tessera
