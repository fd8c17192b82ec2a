#pragma once

#include <optional>

#include "core/op.h"

namespace tessera {

/// Layer normalization over the last dim:
///   y = (x − mean(x)) / sqrt(var(x) + eps) · gamma + beta     (biased variance, per row)
/// x [..., C]; gamma and beta [C] are each optional (undefined Tensor() = no scale / no shift).
///
///   Tensor y = layer_norm(x, gamma, beta);   // affine
///   Tensor z = layer_norm(x);                // affine = false
Tensor layer_norm(const Tensor& x, const Tensor& gamma = Tensor(), const Tensor& beta = Tensor(),
                  double eps = 1e-5);
/// layer_norm with y in dtype `out`: x's dtype, or bf16/f16 for f32 x (the f32 value rounded
/// once: bitwise cast(layer_norm(x, gamma, beta, eps), out), without the f32 tensor). Its
/// gradient arrives in `out` and is read as it is (a product under autocast consumes y uncast).
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, DType out);

namespace op {
/// Inputs x [..., C] floating, then gamma [C] if has_gamma, then beta [C] if has_beta (x's dtype).
/// Outputs y [..., C] (x's dtype; Attrs::out may narrow it to bf16/f16 for f32 x), and the
/// per-row statistics mean [...] and rstd [...]
/// (rstd = 1/sqrt(var + eps); f64 for f64 x, else f32), saved for backward. Row statistics
/// are shifted two-pass sums vectorized in x's compute type. Backward through layer_norm_backward(g, x, mean, rstd, gamma)
/// -> dx, dgamma, dbeta; gradients arriving at the mean/rstd outputs are ignored (they are
/// internal: the public function returns y only).
struct LayerNorm : OpBase {
  static constexpr const char* kName = "layer_norm";
  static constexpr unsigned kSaveInputs = 0b11;    // x, gamma (or beta when there is no gamma)
  static constexpr unsigned kSaveOutputs = 0b110;  // mean, rstd
  struct Attrs {
    double eps = 1e-5;
    bool has_gamma = false;
    bool has_beta = false;
    std::optional<DType> out = std::nullopt;  ///< y's dtype; nullopt: x's
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

namespace detail {
/// Dtype of layer norm's row statistics for input dtype `t`: f64 for f64, else f32.
inline DType layer_norm_stats_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }
/// Shape of layer norm's row statistics: x's shape without its last dim.
Shape layer_norm_stats_shape(const Shape& x);
}  // namespace detail

}  // namespace tessera
