#include "kernels/sqrt/sqrt.h"

#include <cmath>

#include "kernels/common/array_map.h"
#include "kernels/common/unary.h"
#include "kernels/ops.h"

namespace tessera {

Tensor sqrt(const Tensor& x) { return call<op::Sqrt>({}, {x})[0]; }

std::vector<TensorMeta> op::Sqrt::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  return infer_unary_floating(kName, in);
}

void op::Sqrt::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cpu::array_map<T>(in[0], out[0], [](const auto& x) { return x.sqrt(); });
  });
}

// d/dx √x = 1 / (2√x) = 0.5 / y.
std::vector<Tensor> op::Sqrt::backward(const BackwardContext& ctx, const Attrs&) {
  return {div(mul(ctx.grad_output(), 0.5), ctx.output(0))};
}

}  // namespace tessera
