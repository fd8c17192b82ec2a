#include "kernels/mul_scalar/mul_scalar.h"

#include "kernels/common/elementwise.h"
#include "kernels/common/unary.h"

namespace tessera {

Tensor mul(const Tensor& x, double s) { return call<op::MulScalar>({s}, {x})[0]; }
Tensor div(const Tensor& x, double s) {
  TS_CHECK(s != 0, ValueError, "div: division of " << x.meta() << " by the scalar 0");
  return mul(x, 1.0 / s);
}

std::vector<TensorMeta> op::MulScalar::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  return infer_unary_floating(kName, in);
}

void op::MulScalar::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T s = static_cast<T>(attrs.scalar);
    cpu::unary_map<T, T>(in[0], out[0], [s](T x) { return x * s; });
  });
}

std::vector<Tensor> op::MulScalar::backward(const BackwardContext& ctx, const Attrs& attrs) {
  return {mul(ctx.grad_output(), attrs.scalar)};
}

}  // namespace tessera
