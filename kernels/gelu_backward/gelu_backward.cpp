#include "kernels/gelu_backward/gelu_backward.h"

#include <unsupported/Eigen/SpecialFunctions>

#include "kernels/common/array_map.h"

namespace tessera {

Tensor gelu_backward(const Tensor& g, const Tensor& x, GeluApprox approx) {
  return call<op::GeluBackward>({approx}, {g, x})[0];
}

std::vector<TensorMeta> op::GeluBackward::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 2);
  const TensorMeta &g = in[0], &x = in[1];
  check_floating(kName, x, "input");
  TS_CHECK(g.dtype == x.dtype || (x.dtype == DType::f32 && is_half(g.dtype)), DTypeError,
           "gelu_backward: gradient " << g << " for input " << x << " (x's dtype, or bf16/f16 for f32 x)");
  TS_CHECK(g.shape == x.shape, ShapeError,
           "gelu_backward: gradient " << g << " and input " << x << " differ in shape");
  TS_CHECK(attrs.approximate == GeluApprox::none || attrs.approximate == GeluApprox::tanh, ValueError,
           "gelu_backward: unknown approximate value " << static_cast<int>(attrs.approximate) << " for " << x);
  return {x};
}

// A bf16/f16 g arrives widened to f32 (exact) by the op machinery: the f32 kernel as for cast(g, f32).
void op::GeluBackward::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (attrs.approximate == GeluApprox::tanh) {
      const T k = static_cast<T>(0.7978845608028654), c = static_cast<T>(0.044715);  // k = √(2/π)
      cpu::array_map_scaled<T>(in[0], in[1], out[0], [=](const auto& v) {
        const Eigen::Array<T, Eigen::Dynamic, 1> t = (k * (v + c * v.cube())).tanh();
        // Product rule on 0.5·x·(1 + t): the (1 + t) term, then x times dt/dx.
        return (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t.square()) * k * (T(1) + T(3) * c * v.square())).eval();
      });
    } else {
      const T r = static_cast<T>(0.7071067811865475);              // 1/√2
      const T inv_sqrt_2pi = static_cast<T>(0.3989422804014327);  // 1/√(2π)
      cpu::array_map_scaled<T>(in[0], in[1], out[0], [=](const auto& v) {
        // Φ(x) + x·φ(x), Φ(x) = 0.5·(1 + erf(x/√2)), φ(x) = e^(-x²/2)/√(2π).
        return T(0.5) * (T(1) + (v * r).erf()) + v * (inv_sqrt_2pi * (T(-0.5) * v.square()).exp());
      });
    }
  });
}

}  // namespace tessera
