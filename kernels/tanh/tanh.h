#pragma once

#include "core/op.h"

namespace tessera {

/// Hyperbolic tangent, elementwise.
Tensor tanh(const Tensor& x);

namespace op {
/// y = tanh x (any shape, floating); backward: dx = g·(1 - y²) (reads the saved output only).
struct Tanh : OpBase {
  static constexpr const char* kName = "tanh";
  static constexpr bool kInPlace = true;
  static constexpr unsigned kSaveOutputs = 0b1;
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
