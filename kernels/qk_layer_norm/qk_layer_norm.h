#pragma once

#include <optional>

#include "core/op.h"

namespace tessera {

/// QK-norm of an attention projection, in one pass over its rows: y [..., Cq + 2·Ck] holds
/// [q | k | v] (q's Cq columns, then k's and v's Ck each), and
///   out = [layer_norm(q)·gq + bq | layer_norm(k)·gk + bk | v]
/// with layer_norm per row as the layer_norm op (biased variance, eps); gq, bq [Cq] and gk, bk
/// [Ck] in y's dtype; out in dtype `out`: y's, or bf16/f16 for f32 y (each value rounded once).
/// The same values as concat(layer_norm(q, gq, bq, eps, out), layer_norm(k, ...), cast(v, out)),
/// without the split, the three pieces and the concat (and their gradients) in memory.
///
///   Tensor qkv = qk_layer_norm(y, C, gq, bq, gk, bk, 1e-5, DType::bf16);   // [B·T, C + 2·Ck]
Tensor qk_layer_norm(const Tensor& y, int64_t q_cols, const Tensor& gq, const Tensor& bq, const Tensor& gk,
                     const Tensor& bk, double eps, DType out);

namespace op {
/// Inputs y [..., W] floating (W = q_cols + 2·Ck, Ck >= 1), gq, bq [q_cols], gk, bk [Ck] (y's
/// dtype). Outputs out [..., W] (y's dtype, or bf16/f16 for f32 y), and the per-row statistics
/// of q and of k: mean_q, rstd_q, mean_k, rstd_k [...] (f64 for f64 y, else f32), saved for
/// backward. Backward through qk_layer_norm_backward -> dy, dgq, dbq, dgk, dbk; gradients at the
/// statistics outputs are ignored.
struct QkLayerNorm : OpBase {
  static constexpr const char* kName = "qk_layer_norm";
  static constexpr unsigned kSaveInputs = 0b1011;     // y, gq, gk
  static constexpr unsigned kSaveOutputs = 0b11110;  // mean_q, rstd_q, mean_k, rstd_k
  struct Attrs {
    int64_t q_cols = 0;
    double eps = 1e-5;
    std::optional<DType> out = std::nullopt;  ///< out's dtype; nullopt: y's
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

namespace detail {
/// k's (and v's) columns of a qk_layer_norm row of `width` columns with q_cols of q; ValueError
/// naming `op` when they are not a positive whole number.
int64_t qk_norm_k_cols(const char* op, int64_t width, int64_t q_cols);
}  // namespace detail

}  // namespace tessera
