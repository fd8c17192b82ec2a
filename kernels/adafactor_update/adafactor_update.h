#pragma once

#include <vector>

#include "core/op.h"
#include "kernels/adafactor_update/adafactor_common.h"

namespace tessera {

/// One Adafactor step with a full (unfactored) second moment, for 1-D (or any) parameters:
/// returns {p', v'}. `lr` and `step` (the 1-based step number t) are 0-d f64 tensors; v is the
/// running average of g² + eps1 (zeros before the first step). See adafactor_factored_update
/// for the factored form used on matrices.
std::vector<Tensor> adafactor_update(const Tensor& p, const Tensor& g, const Tensor& v, const Tensor& lr,
                                     const Tensor& step, const AdafactorAttrs& attrs = {});

namespace op {
/// Fused Adafactor update (Shazeer & Stern 2018, Alg. 5 with full v), over p [*] of n elements:
///   β  = 1 - t^decay_rate
///   v' = β·v + (1 - β)·(g² + eps1)
///   u  = g / sqrt(v')
///   û  = u / max(1, RMS(u) / clip_threshold)            RMS(x) = sqrt(Σx² / n)
///   α  = (relative_step ? min(1e-2, 1/sqrt(t)) : lr) · (scale_parameter ? max(eps2, RMS(p)) : 1)
///   p' = p - α·wd·p - α·û
/// Inputs (p, g, v [*], lr [], step []) -> outputs (p', v' [*]); p, g, v share one floating
/// meta, lr and step are f64. Elements in p's dtype; sums and scalars in f64 (summed in fixed
/// chunks, so the result does not depend on the thread count).
/// In place: p' and v' may share the buffers of p and v. Not differentiable.
struct AdafactorUpdate : OpBase {
  static constexpr const char* kName = "adafactor_update";
  static constexpr bool kInPlace = true;
  static constexpr bool kDifferentiable = false;
  using Attrs = AdafactorAttrs;
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
