#pragma once

#include <vector>

#include "core/op.h"
#include "kernels/adafactor_update/adafactor_common.h"

namespace tessera {

/// One Adafactor step with a factored second moment, for parameters of 2 or more dims: returns
/// {p', s'}. For p [..., n, m], s [..., n + m] holds, for every trailing [n, m] matrix, the
/// running averages of g² + eps1 over each of its n rows followed by those over each of its m
/// columns (zeros before the first step): one state tensor per parameter, n + m numbers per
/// matrix instead of n·m. `lr` and `step` (the 1-based step number t) are 0-d f64 tensors.
std::vector<Tensor> adafactor_factored_update(const Tensor& p, const Tensor& g, const Tensor& s, const Tensor& lr,
                                              const Tensor& step, const AdafactorAttrs& attrs = {});

namespace op {
/// Fused factored Adafactor update (Shazeer & Stern 2018, Alg. 4), for p [B..., n, m] taken as
/// B matrices [n, m], q = g² + eps1, β = 1 - t^decay_rate, and s [B..., n + m] = [row | col]:
///   row'[b, i] = β·row[b, i] + (1 - β)·mean_j q[b, i, j]          (s[b, i],      i < n)
///   col'[b, j] = β·col[b, j] + (1 - β)·mean_i q[b, i, j]          (s[b, n + j],  j < m)
///   v̂[b, i, j] = row'[b, i]·col'[b, j] / mean_i row'[b, i]        (never materialized)
///   u  = g / sqrt(v̂)
///   û  = u / max(1, RMS(u) / clip_threshold)       RMS over the whole tensor
///   α  = (relative_step ? min(1e-2, 1/sqrt(t)) : lr) · (scale_parameter ? max(eps2, RMS(p)) : 1)
///   p' = p - α·wd·p - α·û
/// Inputs (p, g [B..., n, m], s [B..., n + m], lr [], step []) -> outputs (p' [B..., n, m],
/// s' [B..., n + m]); one floating dtype, lr and step f64. Elements in p's dtype; sums and
/// scalars in f64 (fixed summation order: the result does not depend on the thread count).
/// In place: p' and s' may share the buffers of p and s. Not differentiable.
struct AdafactorFactoredUpdate : OpBase {
  static constexpr const char* kName = "adafactor_factored_update";
  static constexpr bool kInPlace = true;
  static constexpr bool kDifferentiable = false;
  using Attrs = AdafactorAttrs;
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
