#include "kernels/mul/mul.h"

#include "kernels/common/binary.h"
#include "kernels/common/elementwise.h"
#include "kernels/ops.h"

namespace tessera {

Tensor mul(const Tensor& a, const Tensor& b) { return call<op::Mul>({}, {a, b})[0]; }

std::vector<TensorMeta> op::Mul::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  return infer_broadcast_binary(kName, in);
}

void op::Mul::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cpu::binary_map<T, T>(in[0], in[1], out[0], [](T a, T b) { return a * b; });
  });
}

std::vector<Tensor> op::Mul::backward(const BackwardContext& ctx, const Attrs&) {
  const Tensor& g = ctx.grad_output();
  return {ctx.needs_input_grad(0) ? sum_to(mul(g, ctx.input(1)), ctx.input_meta(0).shape) : Tensor(),
          ctx.needs_input_grad(1) ? sum_to(mul(g, ctx.input(0)), ctx.input_meta(1).shape) : Tensor()};
}

}  // namespace tessera
