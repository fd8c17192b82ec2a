#pragma once

#include "core/op.h"
#include "core/random.h"
#include "core/sparse/attention_layout.h"

namespace tessera {

struct AttentionDropout;

/// Block-sparse causal self-attention: per batch b, head h and token t,
///   o[b,h,t] = sum_s P[t,s] · v[b,g(h),s],   P[t,·] = softmax over the allowed s of scale · q[b,h,t]·k[b,g(h),s]
/// where the allowed key positions s of t (in query block i = t / bs) are the tokens of the key
/// blocks the layout lists for (h, i), with s <= t inside the diagonal block. Blocks outside
/// the layout are never read. Dense causal attention is the AttentionLayout::dense_causal layout.
/// Grouped-query attention: k and v may have fewer heads Hkv (H a multiple of Hkv; Hkv = 1 is
/// multi-query attention); query head h reads key/value head g(h) = h / (H / Hkv).
///
///   auto layout = AttentionLayout::strided(/*T=*/256, /*bs=*/32, /*heads=*/4, /*stride_blocks=*/2);
///   Tensor o = block_attention(q, k, v, layout);   // q, k, v [B, 4, 256, D] -> o [B, 4, 256, D]
///
/// scale = 0 means 1/sqrt(D). With dropout p > 0, the probabilities are dropped inside the kernel
/// as the `dropout` op would drop P [B, H, T, T] drawn from `gen` (the same mask, bit for bit; it
/// reserves as many Philox blocks): o[b,h,t] = sum_s P[t,s] · z[t,s] / (1 − p) · v[b,h,s].
///
///   Tensor o = block_attention(q, k, v, layout, 0, /*dropout=*/0.1, gen);   // training
Tensor block_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayoutPtr& layout,
                       double scale = 0, double dropout = 0, Generator& gen = default_generator());

namespace op {
/// Inputs q [B, H, T, D], k, v [B, Hkv, T, D] (one floating dtype; H a multiple of Hkv); the
/// layout has H heads (one per query head) and T = layout T.
/// Outputs o [B, H, T, D] (q's dtype) and lse [B, H, T], the log-sum-exp of each row's scaled
/// scores over its allowed positions (f64 for f64 inputs, else f32), saved for backward.
/// Forward per (b, h, query block i): S = scale · Q_i·K_jᵀ over the listed key blocks j
/// (key > query masked on the diagonal block), lse = log sum exp S, P = exp(S − lse), O_i = P·V.
/// On CUDA, bf16/f16 with head dim 32, 64 or 128 and blocks of 32 or 64 run on tensor cores
/// (flash_sm80.h: one pass, P rounded to the dtype before P·V); other dtypes, block sizes 8 and
/// 16 and other head dims run a simpler scalar kernel (the same results to rounding).
/// Dropout (attrs.dropout = p > 0): P's element (b·h, t, s) is kept iff the `dropout` op's rule
/// keeps element (bh·T + t)·T + s of Philox stream (seed, start + the optional fourth input, the
/// Philox base; see OpBase::kRandom and attention_dropout.h), and kept values are scaled by
/// 1/(1 − p); lse is that of the undropped P. With p = 0 the op draws nothing and takes no base.
/// Backward through block_attention_backward(do, q, k, v, o, lse) -> dq, dk, dv, which
/// recomputes P from lse (and the mask from the stream). A gradient arriving at lse is ignored
/// (lse is internal: the public function returns o only).
struct BlockAttention : OpBase {
  static constexpr const char* kName = "block_attention";
  static constexpr unsigned kSaveInputs = 0b1111;  // q, k, v, the Philox base (when given)
  static constexpr unsigned kSaveOutputs = 0b11;   // o, lse
  static constexpr bool kRandom = true;            // with dropout > 0 (draws_random)
  struct Attrs {
    AttentionLayoutPtr layout;
    double scale = 0;    ///< 0 = 1/sqrt(D)
    double dropout = 0;  ///< p of the dropout on P
    uint64_t seed = 0;   ///< Philox stream of the mask
    uint64_t start = 0;  ///< its first block (relative to the base input, if any)
  };
  static bool draws_random(const Attrs& a) { return a.dropout > 0; }
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

namespace detail {
/// The softmax scale block attention uses: `scale`, or 1/sqrt(D) when it is 0.
double attention_scale(double scale, int64_t D);
/// Checks q [B, H, T, D], k, v [B, Hkv, T, D] (H % Hkv == 0) against each other and `layout` for
/// op `op`; returns the meta
/// of the lse [B, H, T] (f64 for f64 inputs, else f32). Throws ShapeError/DTypeError/ValueError.
TensorMeta check_block_attention(const char* op, const TensorMeta& q, const TensorMeta& k, const TensorMeta& v,
                                 const AttentionLayoutPtr& layout, double scale);
/// Checks the dropout probability p and, when `base` is given, the Philox base input (i32[2] on
/// q's device; only with p > 0).
void check_attention_dropout(const char* op, double p, const TensorMeta& q, const TensorMeta* base);
/// Philox blocks a dropout mask over P [B, H, T, T] of q [B, H, T, D] takes.
uint64_t attention_dropout_blocks(const Shape& q);
/// The CPU kernels' mask: p, seed and first block start + the Philox base in[base_input] (read on
/// the host) when there is one.
AttentionDropout attention_dropout_on_host(const std::vector<Tensor>& in, size_t base_input, double p,
                                           uint64_t seed, uint64_t start);
}  // namespace detail

}  // namespace tessera
