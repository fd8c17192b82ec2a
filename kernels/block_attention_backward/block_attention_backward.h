#pragma once

#include "core/op.h"
#include "core/sparse/attention_layout.h"

namespace tessera {

/// Gradients of block_attention from the output gradient g = dO [B, H, T, D], the inputs
/// q [B, H, T, D], k, v [B, Hkv, T, D], the saved output o [B, H, T, D] and row log-sum-exp lse [B, H, T].
/// Returns {dq, dk, dv}: dq like q [B, H, T, D], dk and dv like k [B, Hkv, T, D] (grouped-query
/// attention: each sums over the H / Hkv query heads that read it). scale = 0 means 1/sqrt(D). Without dropout only:
/// a forward with dropout differentiates through its op (op::BlockAttention::backward), which passes
/// the mask's stream on.
std::vector<Tensor> block_attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& o, const Tensor& lse,
                                             const AttentionLayoutPtr& layout, double scale = 0);

namespace op {
/// Inputs g, q, k, v, o [B, H, T, D] (one floating dtype) and lse [B, H, T] (f64 for f64,
/// else f32); the layout as in BlockAttention. Per (b, h) and layout tile (i, j), with P
/// recomputed from lse (P = exp(S − lse), S = scale · Q_i·K_jᵀ masked as in the forward):
///   dP = dO_i·V_jᵀ,   dS = P ⊙ (dP − Δ_i),   Δ_t = rowsum(dO ⊙ O)_t = sum_s P_ts dP_ts,
///   dq_i += scale · dS·K_j,   dk_j += scale · dSᵀ·Q_i,   dv_j += Pᵀ·dO_i.
/// (Δ is the softmax Jacobian's subtracted term: dS_ts = P_ts (dP_ts − sum_u P_tu dP_tu), and
/// sum_u P_tu dP_tu = dO_t · sum_u P_tu V_u = dO_t · O_t.) dq is computed per query block,
/// dk/dv per key block (walking the layout's column table); no atomics, deterministic. On CUDA,
/// bf16/f16 with head dim 32, 64 or 128 and blocks of 32 or 64 run on tensor cores
/// (flash_sm80_backward.h), the rest a simpler scalar kernel. Not differentiable.
/// With the forward's dropout (attrs.dropout, seed, start and the optional seventh input, the
/// Philox base; Z the forward's mask, c = 1/(1 − p)): dP = c·Z ⊙ (dO_i·V_jᵀ), dS = P ⊙ (dP − Δ)
/// with Δ = rowsum(dO ⊙ O) of the dropped output as before, and dv_j += (c·Z ⊙ P)ᵀ·dO_i.
struct BlockAttentionBackward : OpBase {
  static constexpr const char* kName = "block_attention_backward";
  static constexpr bool kDifferentiable = false;
  static constexpr bool kRandom = true;  // with dropout > 0 (draws_random)
  struct Attrs {
    AttentionLayoutPtr layout;
    double scale = 0;    ///< 0 = 1/sqrt(D)
    double dropout = 0;  ///< the forward's
    uint64_t seed = 0;
    uint64_t start = 0;
  };
  static bool draws_random(const Attrs& a) { return a.dropout > 0; }
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
