#include "kernels/sigmoid/sigmoid.h"

#include <cmath>

#include "kernels/common/elementwise.h"
#include "kernels/ops.h"

namespace tessera {

Tensor sigmoid(const Tensor& x) { return call<Sigmoid>({}, {x})[0]; }

std::vector<TensorMeta> Sigmoid::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  check_num_inputs(kName, in, 1);
  check_floating(kName, in[0]);
  return {in[0]};
}

void Sigmoid::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Two branches so e^(-|x|) never overflows: σ(x) = 1/(1+e^-x) for x >= 0, e^x/(1+e^x) below.
    cpu::unary_map<T, T>(in[0], out[0], [](T x) {
      if (x >= 0) return T(1) / (T(1) + std::exp(-x));
      const T e = std::exp(x);
      return e / (T(1) + e);
    });
  });
}

// d/dx σ(x) = σ(x)·(1 - σ(x)) = y·(1 - y).
std::vector<Tensor> Sigmoid::backward(const BackwardContext& ctx, const Attrs&) {
  const Tensor& y = ctx.output(0);
  return {mul(ctx.grad_output(), mul(y, sub(1.0, y)))};
}

}  // namespace tessera
