#pragma once

#include "core/op.h"

namespace tessera {

/// Gradient of log_softmax over the last dim from the output gradient g and the saved
/// output y = log_softmax(x): dx = g − exp(y) · sum(g, −1, keepdim).
Tensor log_softmax_backward(const Tensor& g, const Tensor& y);

namespace op {
/// Inputs g [..., C], y [..., C] (same meta, floating) -> dx [..., C];
/// per row: dx_j = g_j − exp(y_j) · sum_k g_k (exp(y) is softmax(x)). Not differentiable.
struct LogSoftmaxBackward : OpBase {
  static constexpr const char* kName = "log_softmax_backward";
  static constexpr bool kDifferentiable = false;
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
