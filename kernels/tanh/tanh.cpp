#include "kernels/tanh/tanh.h"

#include <cmath>

#include "kernels/common/array_map.h"
#include "kernels/common/unary.h"
#include "kernels/ops.h"

namespace tessera {

Tensor tanh(const Tensor& x) { return call<op::Tanh>({}, {x})[0]; }

std::vector<TensorMeta> op::Tanh::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  return infer_unary_floating(kName, in);
}

void op::Tanh::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cpu::array_map<T>(in[0], out[0], [](const auto& x) { return x.tanh(); });
  });
}

// d/dx tanh x = 1 - tanh² x = 1 - y².
std::vector<Tensor> op::Tanh::backward(const BackwardContext& ctx, const Attrs&) {
  const Tensor& y = ctx.output(0);
  return {mul(ctx.grad_output(), sub(1.0, mul(y, y)))};
}

}  // namespace tessera
