#pragma once

#include "core/op.h"

namespace tessera {

/// Gradients of layer_norm from the output gradient g [..., C], the input x [..., C], the
/// saved row statistics mean [...] and rstd [...], and gamma [C] (undefined when there is none).
/// g may be bf16/f16 for f32 x (the gradient of layer_norm(..., out) with a narrowed y).
/// Returns {dx [..., C], dgamma [C], dbeta [C]} (dgamma/dbeta are computed in any case).
std::vector<Tensor> layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean,
                                        const Tensor& rstd, const Tensor& gamma = Tensor());

namespace op {
/// Inputs g, x [..., C] (g in x's dtype, or bf16/f16 for f32 x: the gradient of a narrowed y,
/// widened exactly, so the results are those for cast(g, f32)); mean, rstd [...] (f64 for f64 x,
/// else f32); gamma [C] if has_gamma. Outputs in x's dtype.
/// With xhat = (x − mean)·rstd and gh = g·gamma (gh = g without gamma), per row:
///   dx     = rstd · (gh − mean_C(gh) − xhat · mean_C(gh · xhat))
///   dgamma = sum_rows(g · xhat),   dbeta = sum_rows(g)
/// (dx: y = xhat·gamma + beta, and xhat's Jacobian removes the row mean and the component
/// along xhat, scaled by rstd.) Not differentiable.
struct LayerNormBackward : OpBase {
  static constexpr const char* kName = "layer_norm_backward";
  static constexpr bool kDifferentiable = false;
  struct Attrs {
    bool has_gamma = false;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
