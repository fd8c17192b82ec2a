#pragma once

#include <vector>

#include "core/op.h"
#include "kernels/common/adam_step.h"

namespace tessera {

/// One Adam-family step on a parameter (PyTorch's torch.optim.Adam / AdamW, amsgrad off):
/// returns {p', m', v'}. `decay` says where weight decay enters: AdamDecay::coupled (Adam, L2:
/// wd·p joins the gradient before the moments) or AdamDecay::decoupled (AdamW: p shrinks by
/// lr·wd, then the Adam step). `lr` and `step` (the 1-based step number t) are 0-d f64 tensors;
/// m and v are the first and second moment estimates (zeros before the first step).
/// `grad_scale` (optional 0-d f64, e.g. the clip factor): update with g·grad_scale instead of g.
///
///   auto [p2, m2, v2] = adam_update(p, g, m, v, lr, t, AdamDecay::decoupled, 0.9, 0.999, 1e-8, 0.01);
std::vector<Tensor> adam_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                                const Tensor& lr, const Tensor& step, AdamDecay decay, double beta1 = 0.9,
                                double beta2 = 0.999, double eps = 1e-8, double weight_decay = 0.0,
                                const Tensor& grad_scale = Tensor());

namespace op {
/// Fused Adam-family update, elementwise over p [*]:
///   g' = g + wd·p                 (coupled; decoupled: g' = g)
///   m' = b1·m + (1 - b1)·g'
///   v' = b2·v + (1 - b2)·g'²
///   p' = p·d - (lr / (1 - b1^t)) · m' / (sqrt(v') / sqrt(1 - b2^t) + eps)
/// with d = 1 (coupled) or d = 1 - lr·wd (decoupled: PyTorch's AdamW order, decay first, then
/// the Adam step); i.e. p·d - lr·mhat / (sqrt(vhat) + eps) with mhat = m'/(1 - b1^t),
/// vhat = v'/(1 - b2^t). Bias corrections are computed in f64.
/// Inputs (p, g, m, v [*], lr [], step [][, grad_scale []]) -> outputs (p', m', v' [*]); p, g, m,
/// v share one floating meta, lr, step and grad_scale are f64 on p's device. Computed in p's
/// dtype (bf16/f16 in f32, rounded once when stored). The optional grad_scale s replaces g by
/// g·s as mul(g, cast(s, T)) stores it (s rounded to T, the product rounded to T), so the
/// result is bitwise that of the update on the scaled gradient (the global-norm clip factor
/// without a pass over g).
/// Errors name the op with its mode: "adam_update (adam)" or "adam_update (adamw)".
/// In place: p', m', v' may share the buffers of p, m, v (the kernel reads element i of every
/// input before it writes element i of the outputs). Not differentiable.
struct AdamUpdate : OpBase {
  static constexpr const char* kName = "adam_update";
  static constexpr bool kInPlace = true;
  static constexpr bool kDifferentiable = false;
  static constexpr bool kHalfNative = true;  // cpu() widens bf16/f16 itself, after scaling g in its dtype
  struct Attrs {
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    AdamDecay decay = AdamDecay::coupled;
    double weight_decay = 0.0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
