// Edge bias: a learned gain and bias per output channel for the output positions of a convolution
// whose receptive field reaches into the padding, one pair per edge group (conv_geometry.h's
// edge_groups: positions with the same taps outside the input); interior positions pass through.
//
//   Tensor groups = edge_group_index(g, {T});              // i32 [P]: group e, or -1 (interior)
//   Tensor y = edge_bias(x, groups, gain, bias);           // x [N, out…, K], gain/bias [E, K]
//
//   y[n, p, k] = x[n, p, k]·gain[e, k] + bias[e, k]   where e = groups[p] ≥ 0
//   y[n, p, k] = x[n, p, k]                            where groups[p] = -1
#pragma once

#include "core/op.h"

namespace tessera {

/// y like x [N, spatial…, K] (any number of spatial axes, P positions in all); groups i32 [P] with
/// values in [-1, E); gain and bias [E, K] in x's dtype (bias may be undefined: no bias).
Tensor edge_bias(const Tensor& x, const Tensor& groups, const Tensor& gain, const Tensor& bias = Tensor());

namespace op {
/// Inputs x, groups, gain, then bias when `bias`; output like x. A group index outside [-1, E) is
/// a ValueError on the CPU; the CUDA kernel treats it as interior (it never reads past gain).
///
/// Backward (G = dY): dx = edge_bias(G, groups, gain) (no bias); (dgain, dbias) =
/// edge_bias_grad(x, G, groups): dgain[e, k] = Σ over n and the positions of group e of G·x,
/// dbias[e, k] = Σ G; groups get no gradient.
struct EdgeBias : OpBase {
  static constexpr const char* kName = "edge_bias";
  static constexpr unsigned kSaveInputs = 0b0111;  // x, groups, gain
  struct Attrs {
    bool bias = true;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

namespace detail {
/// Checks x [N, spatial…, K] (floating, ≥ 2 axes), groups i32 [P] (P = the product of x's spatial
/// sizes) and a per-group parameter [E, K] in x's dtype (`what` names it); returns P.
int64_t edge_bias_check(const char* op, const TensorMeta& x, const TensorMeta& groups, const TensorMeta& param,
                        const char* what);
}  // namespace detail

}  // namespace tessera
