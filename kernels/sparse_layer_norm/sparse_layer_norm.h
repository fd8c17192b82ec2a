#pragma once

#include <cstdint>

#include "core/op.h"

namespace tessera {

/// Segmented ("sparse") layer normalization over the last dim, with an optional fused ReLU.
/// The last dim C is split into `segments` equal, contiguous groups of G = C / segments
/// features (aligned with the block structure of a block-sparse layer); each group of each
/// row is normalized on its own:
///   z[..., s, j] = (x[..., s, j] − mean_s) / sqrt(var_s + eps) · gamma[sG + j] + beta[sG + j]
///   y = relu ? max(z, 0) : z                                 (biased variance, per row and segment)
/// x [..., C] with C % segments == 0; gamma and beta [C] are each optional (undefined = none).
/// With segments == 1 and relu off this is layer_norm, bit for bit.
///
///   Tensor h = sparse_layer_norm(x, 4, gamma, beta, 1e-5, /*relu=*/true);  // 4 groups, then ReLU
Tensor sparse_layer_norm(const Tensor& x, int64_t segments, const Tensor& gamma = Tensor(),
                         const Tensor& beta = Tensor(), double eps = 1e-5, bool relu = false);

namespace op {
/// Inputs x [..., C] floating, then gamma [C] if has_gamma, then beta [C] if has_beta (x's dtype).
/// Outputs y [..., C] (x's dtype), and the per-row, per-segment statistics mean [..., S] and
/// rstd [..., S] (S = segments; the shape of x with its last dim replaced by S; f64 for f64 x,
/// else f32), saved for backward; rstd = 1/sqrt(var + eps). Backward through
/// sparse_layer_norm_backward(g, x, mean, rstd, y, gamma) -> dx, dgamma, dbeta (y is read only
/// with relu, for the mask y > 0); gradients arriving at mean/rstd are ignored (the public
/// function returns y only).
struct SparseLayerNorm : OpBase {
  static constexpr const char* kName = "sparse_layer_norm";
  static constexpr unsigned kSaveInputs = 0b11;    // x, gamma (or beta when there is no gamma)
  static constexpr unsigned kSaveOutputs = 0b111;  // y (the relu mask), mean, rstd
  struct Attrs {
    int64_t segments = 1;
    double eps = 1e-5;
    bool relu = false;
    bool has_gamma = false;
    bool has_beta = false;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

namespace detail {
/// Shape of sparse layer norm's statistics: x's shape with its last dim replaced by `segments`.
Shape sparse_layer_norm_stats_shape(const Shape& x, int64_t segments);
/// Rule on x shared by the op and its backward: x floating with a non-empty last dim
/// (detail::check_norm_input), ValueError unless segments >= 1, ShapeError unless the last dim is
/// divisible by segments (names `op`, x and segments).
void check_segments(const char* op, const TensorMeta& x, int64_t segments);
}  // namespace detail

}  // namespace tessera
