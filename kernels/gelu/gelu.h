#pragma once

#include <optional>

#include "core/op.h"

namespace tessera {

/// Which GELU formula to use.
enum class GeluApprox {
  none,  ///< exact: x·Φ(x) = 0.5·x·(1 + erf(x/√2))
  tanh,  ///< 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))  (GPT-2 / BERT)
};

/// "none" or "tanh" (for messages and configs).
const char* gelu_approx_name(GeluApprox approx);

/// Gaussian error linear unit, elementwise: gelu(x) or gelu(x, GeluApprox::tanh).
Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::none);
/// gelu with its output in dtype `out`: x's dtype, or bf16/f16 for f32 x (the f32 value rounded
/// once: bitwise cast(gelu(x, approx), out), without the f32 tensor). Its gradient arrives in
/// `out` and is read as it is (a product under autocast consumes y without a cast).
Tensor gelu(const Tensor& x, GeluApprox approx, DType out);

namespace op {
/// y = gelu(x) (any shape, floating; y in x's dtype, or bf16/f16 for f32 x when Attrs::out says
/// so). Backward: dx = gelu_backward(g, x, approximate) (g in y's dtype, dx in x's), an op with
/// the closed-form derivative (see kernels/gelu_backward/); reads the saved input.
struct Gelu : OpBase {
  static constexpr const char* kName = "gelu";
  static constexpr bool kInPlace = true;
  static constexpr unsigned kSaveInputs = 0b1;
  struct Attrs {
    GeluApprox approximate = GeluApprox::none;
    std::optional<DType> out = std::nullopt;  ///< y's dtype; nullopt: x's
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
