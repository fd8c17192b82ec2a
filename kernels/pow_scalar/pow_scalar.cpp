#include "kernels/pow_scalar/pow_scalar.h"

#include <cmath>

#include "kernels/common/elementwise.h"
#include "kernels/ops.h"

namespace tessera {

Tensor pow(const Tensor& x, double p) { return call<op::PowScalar>({p}, {x})[0]; }
Tensor div(double s, const Tensor& x) { return mul(pow(x, -1.0), s); }

std::vector<TensorMeta> op::PowScalar::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1);
  check_floating(kName, in[0]);
  TS_CHECK(!std::isnan(attrs.exponent), ValueError, "pow_scalar: exponent is NaN for " << in[0]);
  return {in[0]};
}

void op::PowScalar::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const double p = attrs.exponent;
    // Common exponents get exact, faster forms; the rest go through std::pow.
    if (p == 2.0) {
      cpu::unary_map<T, T>(in[0], out[0], [](T x) { return x * x; });
    } else if (p == 1.0) {
      cpu::unary_map<T, T>(in[0], out[0], [](T x) { return x; });
    } else if (p == -1.0) {
      cpu::unary_map<T, T>(in[0], out[0], [](T x) { return T(1) / x; });
    } else {
      const T tp = static_cast<T>(p);
      cpu::unary_map<T, T>(in[0], out[0], [tp](T x) { return std::pow(x, tp); });
    }
  });
}

// d/dx x^p = p·x^(p-1).
std::vector<Tensor> op::PowScalar::backward(const BackwardContext& ctx, const Attrs& attrs) {
  const double p = attrs.exponent;
  const Tensor& g = ctx.grad_output();
  if (p == 0.0) return {mul(g, 0.0)};
  if (p == 1.0) return {g};
  return {mul(mul(g, pow(ctx.input(0), p - 1.0)), p)};
}

}  // namespace tessera
