#include "kernels/fast_gelu/fast_gelu.h"

#include <cmath>

#include "kernels/common/elementwise.h"
#include "kernels/common/unary.h"
#include "kernels/ops.h"

namespace tessera {

Tensor fast_gelu(const Tensor& x) { return call<op::FastGelu>({}, {x})[0]; }

std::vector<TensorMeta> op::FastGelu::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  return infer_unary_floating(kName, in);
}

void op::FastGelu::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T a = static_cast<T>(kAlpha);
    // x·σ(a·x) = x / (1 + e^(-a·x)); for very negative x, e^(-a·x) -> inf and the result -> -0.
    cpu::unary_map<T, T>(in[0], out[0], [=](T x) { return x / (T(1) + std::exp(-a * x)); });
  });
}

// d/dx x·σ(a·x) = σ(a·x) + a·x·σ'(a·x) = s + a·x·s·(1 - s).
std::vector<Tensor> op::FastGelu::backward(const BackwardContext& ctx, const Attrs&) {
  const Tensor& x = ctx.input(0);
  Tensor s = sigmoid(mul(x, kAlpha));
  Tensor d = add(s, mul(mul(x, mul(s, sub(1.0, s))), kAlpha));
  return {mul(ctx.grad_output(), d)};
}

}  // namespace tessera
