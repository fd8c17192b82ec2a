#pragma once

#include "core/op.h"

namespace tessera {

/// Broadcasts x to `shape` (numpy rules), materializing the copy.
Tensor expand(const Tensor& x, const Shape& shape);

namespace op {
/// Backward: sum_to(g, x's shape).
struct Expand : OpBase {
  static constexpr const char* kName = "expand";
  struct Attrs {
    Shape shape;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
