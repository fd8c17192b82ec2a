#pragma once

#include "core/op.h"
#include "kernels/block_attention/attention_layout.h"

namespace tessera {

/// Block-sparse causal self-attention: per batch b, head h and token t,
///   o[b,h,t] = sum_s P[t,s] · v[b,h,s],   P[t,·] = softmax over the allowed s of scale · q[b,h,t]·k[b,h,s]
/// where the allowed key positions s of t (in query block i = t / bs) are the tokens of the key
/// blocks the layout lists for (h, i), with s <= t inside the diagonal block. Blocks outside
/// the layout are never read. Dense causal attention is the AttentionLayout::dense_causal layout.
///
///   auto layout = AttentionLayout::strided(/*T=*/256, /*bs=*/32, /*heads=*/4, /*stride_blocks=*/2);
///   Tensor o = block_attention(q, k, v, layout);   // q, k, v [B, 4, 256, D] -> o [B, 4, 256, D]
///
/// scale = 0 means 1/sqrt(D).
Tensor block_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayoutPtr& layout,
                       double scale = 0);

/// Inputs q, k, v [B, H, T, D] (one floating dtype); the layout has H heads and T = layout T.
/// Outputs o [B, H, T, D] (q's dtype) and lse [B, H, T], the log-sum-exp of each row's scaled
/// scores over its allowed positions (f64 for f64 inputs, else f32), saved for backward.
/// Forward per (b, h, query block i): S = scale · Q_i·K_jᵀ over the listed key blocks j
/// (key > query masked on the diagonal block), lse = log sum exp S, P = exp(S − lse), O_i = P·V.
/// On CUDA, bf16/f16 with head dim 32, 64 or 128 and blocks of 32 or 64 run on tensor cores
/// (flash_sm80.h: one pass, P rounded to the dtype before P·V); other dtypes, block sizes 8 and
/// 16 and other head dims run a simpler scalar kernel (the same results to rounding).
/// Backward through block_attention_backward(do, q, k, v, o, lse) -> dq, dk, dv, which
/// recomputes P from lse. A gradient arriving at lse is ignored (lse is internal: the public
/// function returns o only).
struct BlockAttention : OpBase {
  static constexpr const char* kName = "block_attention";
  static constexpr unsigned kSaveInputs = 0b111;  // q, k, v
  static constexpr unsigned kSaveOutputs = 0b11;  // o, lse
  struct Attrs {
    AttentionLayoutPtr layout;
    double scale = 0;  ///< 0 = 1/sqrt(D)
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};

namespace detail {
/// The softmax scale block attention uses: `scale`, or 1/sqrt(D) when it is 0.
double attention_scale(double scale, int64_t D);
/// Checks q, k, v [B, H, T, D] against each other and `layout` for op `op`; returns the meta
/// of the lse [B, H, T] (f64 for f64 inputs, else f32). Throws ShapeError/DTypeError/ValueError.
TensorMeta check_block_attention(const char* op, const TensorMeta& q, const TensorMeta& k, const TensorMeta& v,
                                 const AttentionLayoutPtr& layout, double scale);
}  // namespace detail

}  // namespace tessera
