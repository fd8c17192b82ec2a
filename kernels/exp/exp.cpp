#include "kernels/exp/exp.h"

#include <cmath>

#include "kernels/common/array_map.h"
#include "kernels/common/unary.h"
#include "kernels/ops.h"

namespace tessera {

Tensor exp(const Tensor& x) { return call<op::Exp>({}, {x})[0]; }

std::vector<TensorMeta> op::Exp::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  return infer_unary_floating(kName, in);
}

void op::Exp::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cpu::array_map<T>(in[0], out[0], [](const auto& x) { return x.exp(); });
  });
}

// d/dx e^x = e^x = y.
std::vector<Tensor> op::Exp::backward(const BackwardContext& ctx, const Attrs&) {
  return {mul(ctx.grad_output(), ctx.output(0))};
}

}  // namespace tessera
