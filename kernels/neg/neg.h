#pragma once

#include "core/op.h"

namespace tessera {

/// -x.
Tensor neg(const Tensor& x);

namespace op {
/// y = -x; backward: -g.
struct Neg : OpBase {
  static constexpr const char* kName = "neg";
  static constexpr bool kInPlace = true;
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
