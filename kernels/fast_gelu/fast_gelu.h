#pragma once

#include "core/op.h"

namespace tessera {

/// The sigmoid approximation of GELU: x·σ(1.702·x), elementwise.
Tensor fast_gelu(const Tensor& x);

namespace op {
/// y = x·σ(a·x), a = 1.702 (any shape, floating). The backward rule is written in ops (no
/// separate backward kernel): with s = σ(a·x), dx = g·(s + a·x·s·(1 - s)); reads the saved input.
struct FastGelu : OpBase {
  static constexpr const char* kName = "fast_gelu";
  static constexpr bool kInPlace = true;
  static constexpr unsigned kSaveInputs = 0b1;
  static constexpr double kAlpha = 1.702;
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
