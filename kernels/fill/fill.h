#pragma once

#include "core/op.h"

namespace tessera {

/// A tensor of `meta` filled with `value`, as an op: unlike full(), it can be traced (the
/// autograd engine makes gradient seeds and zero gradients with it).
Tensor fill(const TensorMeta& meta, double value);

namespace op {
/// No inputs; out = value everywhere (converted to meta's dtype). Not differentiable.
struct Fill : OpBase {
  static constexpr const char* kName = "fill";
  static constexpr bool kDifferentiable = false;
  static constexpr bool kHalfNative = true;
  struct Attrs {
    TensorMeta meta;
    double value = 0.0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
