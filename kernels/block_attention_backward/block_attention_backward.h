#pragma once

#include "core/op.h"
#include "kernels/block_attention/attention_layout.h"

namespace tessera {

/// Gradients of block_attention from the output gradient g = dO [B, H, T, D], the inputs
/// q, k, v [B, H, T, D], the saved output o [B, H, T, D] and row log-sum-exp lse [B, H, T].
/// Returns {dq, dk, dv}, each [B, H, T, D]. scale = 0 means 1/sqrt(D).
std::vector<Tensor> block_attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& o, const Tensor& lse,
                                             const AttentionLayoutPtr& layout, double scale = 0);

/// Inputs g, q, k, v, o [B, H, T, D] (one floating dtype) and lse [B, H, T] (f64 for f64,
/// else f32); the layout as in BlockAttention. Per (b, h) and layout tile (i, j), with P
/// recomputed from lse (P = exp(S − lse), S = scale · Q_i·K_jᵀ masked as in the forward):
///   dP = dO_i·V_jᵀ,   dS = P ⊙ (dP − Δ_i),   Δ_t = rowsum(dO ⊙ O)_t = sum_s P_ts dP_ts,
///   dq_i += scale · dS·K_j,   dk_j += scale · dSᵀ·Q_i,   dv_j += Pᵀ·dO_i.
/// (Δ is the softmax Jacobian's subtracted term: dS_ts = P_ts (dP_ts − sum_u P_tu dP_tu), and
/// sum_u P_tu dP_tu = dO_t · sum_u P_tu V_u = dO_t · O_t.) dq is computed per query block,
/// dk/dv per key block (walking the layout's column table); no atomics, deterministic. On CUDA,
/// bf16/f16 with head dim 32 or 64 and blocks of 32 or 64 run on tensor cores
/// (flash_sm80_backward.h), the rest a simpler scalar kernel. Not differentiable.
struct BlockAttentionBackward : OpBase {
  static constexpr const char* kName = "block_attention_backward";
  static constexpr bool kDifferentiable = false;
  struct Attrs {
    AttentionLayoutPtr layout;
    double scale = 0;  ///< 0 = 1/sqrt(D)
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};

}  // namespace tessera
