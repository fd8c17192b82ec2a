#include "kernels/gelu/gelu.h"

#include <unsupported/Eigen/SpecialFunctions>

#include "kernels/common/array_map.h"
#include "kernels/ops.h"

namespace tessera {

const char* gelu_approx_name(GeluApprox approx) {
  switch (approx) {
    case GeluApprox::none: return "none";
    case GeluApprox::tanh: return "tanh";
  }
  return "?";
}

Tensor gelu(const Tensor& x, GeluApprox approx) { return call<op::Gelu>({approx, std::nullopt}, {x})[0]; }

Tensor gelu(const Tensor& x, GeluApprox approx, DType out) { return call<op::Gelu>({approx, out}, {x})[0]; }

std::vector<TensorMeta> op::Gelu::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1);
  const TensorMeta& x = in[0];
  check_floating(kName, x);
  TS_CHECK(attrs.approximate == GeluApprox::none || attrs.approximate == GeluApprox::tanh, ValueError,
           "gelu: unknown approximate value " << static_cast<int>(attrs.approximate) << " for " << x);
  const DType out = attrs.out.value_or(x.dtype);
  TS_CHECK(out == x.dtype || (x.dtype == DType::f32 && is_half(out)), DTypeError,
           "gelu: output dtype " << out << " for x " << x << " (x's dtype, or bf16/f16 for f32 x)");
  return {TensorMeta{x.shape, out, x.device}};
}

// A bf16/f16 y arrives as an f32 buffer (rounded once by the op machinery), like x.
void op::Gelu::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (attrs.approximate == GeluApprox::tanh) {
      // 0.5·x·(1 + tanh(k·(x + c·x³))), k = √(2/π) = 0.79788..., c = 0.044715.
      const T k = static_cast<T>(0.7978845608028654), c = static_cast<T>(0.044715);
      cpu::array_map<T>(in[0], out[0], [=](const auto& x) { return T(0.5) * x * (T(1) + (k * (x + c * x.cube())).tanh()); });
    } else {
      // x·Φ(x) = 0.5·x·(1 + erf(x/√2)).
      const T r = static_cast<T>(0.7071067811865475);
      cpu::array_map<T>(in[0], out[0], [=](const auto& x) { return T(0.5) * x * (T(1) + (x * r).erf()); });
    }
  });
}

std::vector<Tensor> op::Gelu::backward(const BackwardContext& ctx, const Attrs& attrs) {
  return {gelu_backward(ctx.grad_output(), ctx.input(0), attrs.approximate)};
}

}  // namespace tessera
