#pragma once

#include <optional>

#include "core/op.h"

namespace tessera {

/// min(max(x, lo), hi), elementwise; an absent bound does not clamp that side.
///   clamp(x, 0.0, 6.0);  clamp(x, std::nullopt, 1.0);  clamp(x, -1.0, std::nullopt)
Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi);

namespace op {
/// y = min(max(x, lo), hi) (any shape, floating; NaN stays NaN; bounds rounded to x's dtype).
/// Backward: dx = g where lo <= x <= hi, else 0 (g passes at the bounds themselves);
/// reads the saved input.
struct Clamp : OpBase {
  static constexpr const char* kName = "clamp";
  static constexpr bool kInPlace = true;
  static constexpr unsigned kSaveInputs = 0b1;
  struct Attrs {
    std::optional<double> lo, hi;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
