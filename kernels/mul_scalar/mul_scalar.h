#pragma once

#include "core/op.h"

namespace tessera {

/// x * s.
Tensor mul(const Tensor& x, double s);
/// x / s.
Tensor div(const Tensor& x, double s);

namespace op {
/// y = s·x; backward: s·g.
struct MulScalar : OpBase {
  static constexpr const char* kName = "mul_scalar";
  static constexpr bool kInPlace = true;
  struct Attrs {
    double scalar = 1.0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
