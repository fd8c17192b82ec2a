#pragma once

#include <optional>

#include "core/op.h"

namespace tessera {

/// Elementwise comparisons giving u8 masks (1 where true, 0 elsewhere); not differentiable.
/// The (Tensor, Tensor) forms broadcast (numpy rules) and need one dtype; the (Tensor, double)
/// forms compare with a scalar (rounded to x's dtype when x is floating, exact for integers).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& x, double s);
Tensor ne(const Tensor& x, double s);
Tensor lt(const Tensor& x, double s);
Tensor le(const Tensor& x, double s);
Tensor gt(const Tensor& x, double s);
Tensor ge(const Tensor& x, double s);

enum class CompareMode { eq, ne, lt, le, gt, ge };

/// "eq", "ne", ... (for messages).
const char* compare_mode_name(CompareMode mode);

namespace op {
/// out = (a <mode> b) as u8, shape = broadcast(a, b); or out = (x <mode> scalar), shape of x
/// when the scalar attribute is set (then there is one input). Inputs: any numeric dtype.
struct Compare : OpBase {
  static constexpr const char* kName = "compare";
  static constexpr bool kDifferentiable = false;
  struct Attrs {
    CompareMode mode = CompareMode::eq;
    std::optional<double> scalar;  ///< set: compare the one input with it
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
