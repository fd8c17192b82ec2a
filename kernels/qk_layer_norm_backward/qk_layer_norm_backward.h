#pragma once

#include "core/op.h"

namespace tessera {

/// Gradients of qk_layer_norm from the output gradient g [..., W] (y's dtype, or bf16/f16 for
/// f32 y), the input y [..., W], the saved statistics of q and k ([...] each) and gq [q_cols],
/// gk [Ck]. Returns {dy [..., W], dgq, dbq [q_cols], dgk, dbk [Ck]}: on q's and k's columns the
/// layer_norm backward, on v's dy = g (widened).
std::vector<Tensor> qk_layer_norm_backward(const Tensor& g, const Tensor& y, const Tensor& mean_q,
                                           const Tensor& rstd_q, const Tensor& mean_k, const Tensor& rstd_k,
                                           const Tensor& gq, const Tensor& gk);

namespace op {
/// Inputs g, y [..., W]; mean_q, rstd_q, mean_k, rstd_k [...]; gq [q_cols]; gk [Ck] (q_cols
/// from gq's size). Outputs in y's dtype. Per row and per segment (q, then k), with
/// xhat = (x − mean)·rstd and gh = g·gamma:
///   dx = rstd · (gh − mean(gh) − xhat · mean(gh · xhat)),  dgamma = Σ_rows g·xhat,  dbeta = Σ_rows g
/// (layer_norm_backward's math); on v's columns dx = g. Not differentiable.
struct QkLayerNormBackward : OpBase {
  static constexpr const char* kName = "qk_layer_norm_backward";
  static constexpr bool kDifferentiable = false;
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
