#pragma once

#include "core/op.h"

namespace tessera {

/// e^x, elementwise.
Tensor exp(const Tensor& x);

namespace op {
/// y = e^x (any shape, floating); backward: dx = g·y (reads the saved output only).
struct Exp : OpBase {
  static constexpr const char* kName = "exp";
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
