#include "kernels/sigmoid/sigmoid.h"

#include <cmath>

#include "kernels/common/array_map.h"
#include "kernels/common/unary.h"
#include "kernels/ops.h"

namespace tessera {

Tensor sigmoid(const Tensor& x) { return call<op::Sigmoid>({}, {x})[0]; }

std::vector<TensorMeta> op::Sigmoid::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  return infer_unary_floating(kName, in);
}

void op::Sigmoid::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // σ(x) = 1/(1+e^-x) through Eigen's logistic (vectorized; saturates to 0 and 1 without NaN).
    cpu::array_map<T>(in[0], out[0], [](const auto& x) { return x.logistic(); });
  });
}

// d/dx σ(x) = σ(x)·(1 - σ(x)) = y·(1 - y).
std::vector<Tensor> op::Sigmoid::backward(const BackwardContext& ctx, const Attrs&) {
  const Tensor& y = ctx.output(0);
  return {mul(ctx.grad_output(), mul(y, sub(1.0, y)))};
}

}  // namespace tessera
