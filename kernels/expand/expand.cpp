#include "kernels/expand/expand.h"

#include "kernels/common/binary.h"
#include "kernels/common/elementwise.h"

namespace tessera {

Tensor expand(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  return call<op::Expand>({shape}, {x})[0];
}

std::vector<TensorMeta> op::Expand::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1);
  check_floating(kName, in[0]);
  Shape b = broadcast_shapes(in[0].shape, attrs.shape, kName);
  TS_CHECK(b == attrs.shape, ShapeError, "expand: cannot expand " << in[0].shape << " to " << attrs.shape);
  return {TensorMeta{attrs.shape, in[0].dtype, in[0].device}};
}

void op::Expand::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cpu::broadcast_copy<T>(in[0], out[0]);
  });
}

std::vector<Tensor> op::Expand::backward(const BackwardContext& ctx, const Attrs&) {
  return {sum_to(ctx.grad_output(), ctx.input_meta(0).shape)};
}

}  // namespace tessera
