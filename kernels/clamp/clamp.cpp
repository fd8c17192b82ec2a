#include "kernels/clamp/clamp.h"

#include <cmath>
#include <limits>

#include "kernels/common/elementwise.h"
#include "kernels/ops.h"

namespace tessera {

Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  return call<op::Clamp>({lo, hi}, {x})[0];
}

std::vector<TensorMeta> op::Clamp::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1);
  check_floating(kName, in[0]);
  TS_CHECK(!(attrs.lo && std::isnan(*attrs.lo)) && !(attrs.hi && std::isnan(*attrs.hi)), ValueError,
           "clamp: a bound is NaN for " << in[0]);
  TS_CHECK(!(attrs.lo && attrs.hi && *attrs.lo > *attrs.hi), ValueError,
           "clamp: lower bound " << *attrs.lo << " exceeds upper bound " << *attrs.hi << " for " << in[0]);
  return {in[0]};
}

void op::Clamp::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // An absent bound is ±inf, which never clamps (and lets NaN through, since NaN < lo is false).
    const T inf = std::numeric_limits<T>::infinity();
    const T lo = attrs.lo ? static_cast<T>(*attrs.lo) : -inf;
    const T hi = attrs.hi ? static_cast<T>(*attrs.hi) : inf;
    cpu::unary_map<T, T>(in[0], out[0], [=](T x) { return x < lo ? lo : (x > hi ? hi : x); });
  });
}

// dx = g on [lo, hi], 0 outside: zero g where x < lo, then where x > hi.
std::vector<Tensor> op::Clamp::backward(const BackwardContext& ctx, const Attrs& attrs) {
  Tensor dx = ctx.grad_output();
  if (attrs.lo) dx = masked_fill(dx, lt(ctx.input(0), *attrs.lo), 0.0);
  if (attrs.hi) dx = masked_fill(dx, gt(ctx.input(0), *attrs.hi), 0.0);
  return {dx};
}

}  // namespace tessera
