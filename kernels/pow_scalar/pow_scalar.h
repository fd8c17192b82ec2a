#pragma once

#include "core/op.h"

namespace tessera {

/// x^p, elementwise (std::pow semantics: NaN for negative x and non-integer p).
Tensor pow(const Tensor& x, double p);
/// s / x (= s·x^-1; a composite of pow_scalar and mul_scalar).
Tensor div(double s, const Tensor& x);

namespace op {
/// y = x^p (any shape, floating); backward: dx = g·p·x^(p-1) (reads the saved input;
/// 0 for p = 0, g for p = 1).
struct PowScalar : OpBase {
  static constexpr const char* kName = "pow_scalar";
  static constexpr bool kInPlace = true;
  static constexpr unsigned kSaveInputs = 0b1;
  struct Attrs {
    double exponent = 1.0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
