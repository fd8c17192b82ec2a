#pragma once

#include "core/op.h"

namespace tessera {

/// A new tensor with a copy of x's data (any dtype). Differentiable: gradient passes through.
Tensor copy(const Tensor& x);

/// Copies src's data into the existing tensor dst of the same meta (dtype, shape, device), on
/// that device; no autograd. ShapeError (naming both metas) unless the metas match.
void copy_into(const Tensor& src, const Tensor& dst);

namespace op {
struct Copy : OpBase {
  static constexpr const char* kName = "copy";
  static constexpr bool kHalfNative = true;
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
