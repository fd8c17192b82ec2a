#pragma once

#include "core/op.h"

namespace tessera {

/// max(x, 0), elementwise (NaN stays NaN).
Tensor relu(const Tensor& x);

namespace op {
/// y = max(x, 0) (any shape, floating); backward: dx = g where x > 0, else 0. Since y > 0
/// exactly where x > 0, the rule reads the saved output: masked_fill(g, y <= 0, 0).
struct Relu : OpBase {
  static constexpr const char* kName = "relu";
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
