#pragma once

#include "core/op.h"

namespace tessera {

/// x + s.
Tensor add(const Tensor& x, double s);
/// x - s (= x + (-s)).
Tensor sub(const Tensor& x, double s);
/// s - x (= (-x) + s; a composite of neg and add_scalar).
Tensor sub(double s, const Tensor& x);
/// s - x, spelled with the tensor first.
inline Tensor rsub(const Tensor& x, double s) { return sub(s, x); }

namespace op {
/// y = x + s (any shape, floating); backward: dx = g.
struct AddScalar : OpBase {
  static constexpr const char* kName = "add_scalar";
  static constexpr bool kInPlace = true;
  struct Attrs {
    double scalar = 0.0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
