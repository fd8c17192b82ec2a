#pragma once

#include <cstdint>

#include "core/op.h"

namespace tessera {

/// Gradients of sparse_layer_norm from the output gradient g [..., C], the input x [..., C],
/// the saved statistics mean [..., S] and rstd [..., S] (S = segments), the output y [..., C]
/// when the forward applied ReLU (undefined otherwise: its presence selects the relu rule), and
/// gamma [C] (undefined when there is none). Returns {dx [..., C], dgamma [C], dbeta [C]}
/// (dgamma/dbeta are computed in any case).
std::vector<Tensor> sparse_layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean,
                                               const Tensor& rstd, int64_t segments, const Tensor& y = Tensor(),
                                               const Tensor& gamma = Tensor());

namespace op {
/// Inputs g, x [..., C]; mean, rstd [..., S] (f64 for f64 x, else f32); y [..., C] if relu;
/// gamma [C] if has_gamma. Per row and segment (G = C / S features, xhat = (x − mean)·rstd):
///   gz     = relu ? g · [y > 0] : g              (ReLU's gradient: y = max(z, 0), y > 0 ⇔ z > 0)
///   gh     = gz · gamma                           (gh = gz without gamma)
///   dx     = rstd · (gh − mean_G(gh) − xhat · mean_G(gh · xhat))
///   dgamma = sum_rows(gz · xhat),   dbeta = sum_rows(gz)
/// (dx: z = xhat·gamma + beta, and xhat's Jacobian within a segment removes the segment mean
/// and the component along xhat, scaled by rstd.) Not differentiable.
struct SparseLayerNormBackward : OpBase {
  static constexpr const char* kName = "sparse_layer_norm_backward";
  static constexpr bool kDifferentiable = false;
  struct Attrs {
    int64_t segments = 1;
    bool relu = false;
    bool has_gamma = false;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
