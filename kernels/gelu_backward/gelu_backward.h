#pragma once

#include "core/op.h"
#include "kernels/gelu/gelu.h"

namespace tessera {

/// Gradient of gelu(x, approx) w.r.t. x, given the output gradient g (same shape as x; x's dtype,
/// or bf16/f16 for f32 x: the gradient of a narrowed gelu output, read as cast(g, f32)).
Tensor gelu_backward(const Tensor& g, const Tensor& x, GeluApprox approx = GeluApprox::none);

namespace op {
/// dx = g·gelu'(x); inputs g, x of one shape, x floating, g in x's dtype or bf16/f16 for f32 x
/// (widened exactly: the same dx as for cast(g, f32)); output like x.
///   exact: gelu'(x) = Φ(x) + x·φ(x),  φ(x) = e^(-x²/2) / √(2π)
///   tanh:  u = k·(x + c·x³), t = tanh u:  gelu'(x) = 0.5·(1 + t) + 0.5·x·(1 - t²)·k·(1 + 3c·x²)
/// Not differentiable itself (no second derivative of gelu).
struct GeluBackward : OpBase {
  static constexpr const char* kName = "gelu_backward";
  static constexpr bool kDifferentiable = false;
  static constexpr bool kInPlace = true;
  struct Attrs {
    GeluApprox approximate = GeluApprox::none;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
