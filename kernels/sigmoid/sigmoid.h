#pragma once

#include "core/op.h"

namespace tessera {

/// Logistic sigmoid 1 / (1 + e^-x), elementwise.
Tensor sigmoid(const Tensor& x);

namespace op {
/// y = σ(x) (any shape, floating); backward: dx = g·y·(1 - y) (reads the saved output only).
struct Sigmoid : OpBase {
  static constexpr const char* kName = "sigmoid";
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
