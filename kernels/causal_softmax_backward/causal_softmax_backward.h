#pragma once

#include "core/op.h"

namespace tessera {

/// Gradient of causal_softmax(x, scale) from the output gradient g and the saved output y:
///   dx[..., t, s] = scale · y[..., t, s] · (g[..., t, s] − Σ_{s' <= t+S−T} g[..., t, s'] · y[..., t, s'])
/// for s <= t + (S − T), 0 above (masked positions never read g there).
Tensor causal_softmax_backward(const Tensor& g, const Tensor& y, double scale);

namespace op {
/// Inputs g [..., T, S], y [..., T, S] (same shape and floating dtype, S >= T) -> dx like g.
/// Not differentiable.
struct CausalSoftmaxBackward : OpBase {
  static constexpr const char* kName = "causal_softmax_backward";
  static constexpr bool kDifferentiable = false;
  struct Attrs {
    double scale = 1.0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
