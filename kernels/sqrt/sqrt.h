#pragma once

#include "core/op.h"

namespace tessera {

/// Square root, elementwise (NaN below 0).
Tensor sqrt(const Tensor& x);

namespace op {
/// y = √x (any shape, floating); backward: dx = g·0.5 / y (reads the saved output only).
struct Sqrt : OpBase {
  static constexpr const char* kName = "sqrt";
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
