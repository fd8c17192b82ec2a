// nn::MultiHeadAttention: causal multi-head self-attention over a block-sparse attention layout,
// with dense or block-sparse projections.
//
//   Generator gen(0);
//   nn::MultiHeadAttention attn(nn::AttentionOptions(/*width=*/256, /*heads=*/4, /*seq_len=*/128)
//                                   .block_size(32).layout(nn::AttentionLayoutKind::local).window(2)
//                                   .linear_block_size(32).density(0.5, /*seed=*/1),  // sparse qkv/proj
//                               gen);
//   Tensor y = attn.forward(x, /*batch=*/B);   // x [B*128, 256] (batch-major rows) -> [B*128, 256]
//
// Dense causal attention (GPT-2 / nanoGPT) on a GPU runs as two batched GEMMs around a fused
// causal softmax, with optional dropout on the attention probabilities:
//
//   nn::MultiHeadAttention gpt(nn::AttentionOptions(384, 6, 256).attention_dropout(0.2).dropout(0.2), gen);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/sparse/attention_layout.h"
#include "layers/dropout.h"
#include "layers/layer_norm.h"
#include "layers/module.h"
#include "layers/projection.h"

namespace tessera {
namespace nn {

/// The generated attention layouts of AttentionOptions::layout(kind); their names ("dense",
/// "local", "fixed", "strided") are what configs and command lines say.
enum class AttentionLayoutKind {
  dense,    ///< AttentionLayout::dense_causal
  local,    ///< AttentionLayout::local_window(window)
  fixed,    ///< AttentionLayout::fixed(stride, summary)
  strided,  ///< AttentionLayout::strided(stride)
};
/// The kind of a name; ValueError naming the bad value and the valid ones.
AttentionLayoutKind attention_layout_kind_from_string(const std::string& name);
const char* attention_layout_kind_name(AttentionLayoutKind kind);

/// How MultiHeadAttention computes attention (AttentionOptions::impl); names "auto", "block",
/// "dense".
enum class AttentionImpl {
  automatic,  ///< "auto" (the default): block_attention for every layout, dense causal included
  block,      ///< "block": block_attention (one fused kernel; on CUDA tensor cores for bf16/f16)
  dense,      ///< "dense": the unfused path (matmul, causal_softmax, dropout, matmul; dense causal layout only)
};
/// The impl of a name; ValueError naming the bad value and the valid ones.
AttentionImpl attention_impl_from_string(const std::string& name);
const char* attention_impl_name(AttentionImpl impl);

/// Options of MultiHeadAttention. The attention layout is either given (layout(AttentionLayoutPtr))
/// or generated from an AttentionLayoutKind (dense, local, fixed or strided; the default dense);
/// window, stride and summary count attention blocks of block_size() tokens.
struct AttentionOptions {
  AttentionOptions(int64_t width, int64_t heads, int64_t seq_len)
      : width_(width), heads_(heads), seq_len_(seq_len) {}

  AttentionOptions& width(int64_t c) { width_ = c; return *this; }
  AttentionOptions& heads(int64_t h) { heads_ = h; return *this; }
  /// Key/value heads (grouped-query attention): 0 (the default) = heads; else a divisor of heads,
  /// 1 = multi-query attention. Query head h reads key/value head h / (heads / kv_heads).
  AttentionOptions& kv_heads(int64_t h) { kv_heads_ = h; return *this; }
  AttentionOptions& seq_len(int64_t t) { seq_len_ = t; return *this; }
  /// Attention block size (8, 16, 32 or 64; seq_len must be a multiple).
  AttentionOptions& block_size(int64_t bs) { block_size_ = bs; return *this; }
  /// The kind of the generated layout (AttentionLayoutKind::dense by default).
  AttentionOptions& layout(AttentionLayoutKind kind) { kind_ = kind; return *this; }
  /// An explicit layout (heads and seq_len must match); takes precedence over the kind.
  AttentionOptions& layout(AttentionLayoutPtr l) { layout_ = std::move(l); return *this; }
  AttentionOptions& window(int64_t blocks) { window_ = blocks; return *this; }
  AttentionOptions& stride(int64_t blocks) { stride_ = blocks; return *this; }
  AttentionOptions& summary(int64_t blocks) { summary_ = blocks; return *this; }
  /// Softmax scale; 0 (the default) = 1/sqrt(width / heads).
  AttentionOptions& scale(double s) { scale_ = s; return *this; }
  /// Block size of the qkv and output projections: 0 (the default) = dense Linear.
  AttentionOptions& linear_block_size(int64_t bs) { linear_block_ = bs; return *this; }
  /// Density of the block-sparse projections' random layouts; qkv uses `seed`, proj `seed + 1`.
  AttentionOptions& density(double d, uint64_t seed = 0) { density_ = d; seed_ = seed; return *this; }
  AttentionOptions& bias(bool on) { bias_ = on; return *this; }
  /// Dropout on the output while training (0, the default, adds no op).
  AttentionOptions& dropout(double p) { dropout_ = p; return *this; }
  AttentionOptions& dtype(DType t) { dtype_ = t; return *this; }
  /// How attention is computed: automatic (the default) and block run block_attention for every
  /// layout, the dense causal one included (one fused kernel; on CUDA tensor cores for bf16/f16);
  /// dense the unfused path (scores by matmul, causal_softmax, dropout, matmul; needs the dense
  /// causal layout), kept as a reference and for measurements (bench/attention_gpu).
  AttentionOptions& impl(AttentionImpl how) { impl_ = how; return *this; }
  /// Dropout on the attention probabilities while training, as GPT-2 / nanoGPT do (0, the
  /// default, adds no op): inside block_attention's kernels for every layout, with the mask the
  /// `dropout` op would draw on the dense probabilities (so the dense path draws the same one).
  AttentionOptions& attention_dropout(double p) { attention_dropout_ = p; return *this; }
  /// LayerNorm on the queries and on the keys before the scores (false, the default, adds none):
  /// q = LN_q(q) over its C columns, k = LN_k(k) over its Hkv·D columns, each with its own gain
  /// and bias (OLMo 2's QK-norm). It bounds the attention logits, whose growth destabilizes long
  /// runs at high learning rates (Dehghani et al. 2023, Wortsman et al. 2023).
  AttentionOptions& qk_norm(bool on) { qk_norm_ = on; return *this; }

  int64_t width() const { return width_; }
  int64_t heads() const { return heads_; }
  /// The key/value heads in effect (heads when kv_heads is 0).
  int64_t kv_heads() const { return kv_heads_ == 0 ? heads_ : kv_heads_; }
  int64_t seq_len() const { return seq_len_; }
  int64_t block_size() const { return block_size_; }
  AttentionLayoutKind layout_kind() const { return kind_; }
  const AttentionLayoutPtr& layout() const { return layout_; }
  int64_t window() const { return window_; }
  int64_t stride() const { return stride_; }
  int64_t summary() const { return summary_; }
  double scale() const { return scale_; }
  int64_t linear_block_size() const { return linear_block_; }
  double density() const { return density_; }
  uint64_t seed() const { return seed_; }
  bool bias() const { return bias_; }
  double dropout() const { return dropout_; }
  DType dtype() const { return dtype_; }
  AttentionImpl impl() const { return impl_; }
  double attention_dropout() const { return attention_dropout_; }
  bool qk_norm() const { return qk_norm_; }

 private:
  int64_t width_, heads_, seq_len_;
  int64_t kv_heads_ = 0;
  int64_t block_size_ = 32;
  AttentionLayoutKind kind_ = AttentionLayoutKind::dense;
  AttentionLayoutPtr layout_;
  int64_t window_ = 4, stride_ = 4, summary_ = 1;
  double scale_ = 0;
  int64_t linear_block_ = 0;
  double density_ = 1.0;
  uint64_t seed_ = 0;
  bool bias_ = true;
  double dropout_ = 0;
  DType dtype_ = DType::f32;
  AttentionImpl impl_ = AttentionImpl::automatic;
  double attention_dropout_ = 0;
  bool qk_norm_ = false;
};

/// The attention layout `o` describes: o.layout() when given (checked against heads and seq_len),
/// else the generator of o.layout_kind(). ValueError naming the parameter that is wrong.
AttentionLayoutPtr make_attention_layout(const AttentionOptions& o);

/// The keys and values a MultiHeadAttention has seen while decoding (MultiHeadAttention::decode):
/// k, v [B, Hkv, len, D] for positions 0 .. len-1 of B sequences (Hkv = kv_heads()); empty
/// (len 0) to start.
struct KVCache {
  Tensor k, v;
  int64_t len = 0;
};

/// forward(x [B*T, C], B), rows batch-major (row b*T + t):
///   qkv = x·Wqkv + bqkv                       [B*T, 3C] -> [B, T, 3, H, D] -> [3, B, H, T, D]
///   with qk_norm: qkv = [LN_q(q) | LN_k(k) | v] over q's C and k's Hkv·D columns
///   q, k, v = split(qkv)                      [B, H, T, D] each
///     (kv_heads Hkv < H: qkv [B*T, C + 2·Hkv·D], columns q | k | v, each head-major; q [B, H, T, D],
///      k, v [B, Hkv, T, D])
///   o = block_attention(q, k, v, layout)      [B, H, T, D] (causal, only the layout's blocks;
///                                             probabilities dropped inside while training; run
///                                             as block_attention_packed on qkv's rows, which
///                                             writes o as [B*T, C] directly)
///     or, on the dense path (impl, see AttentionOptions::impl), per (b, h) as [B*H, T, D]:
///       s = q·kᵀ                              [B*H, T, T]
///       p = causal_softmax(s, scale)          (keys s <= query t), dropout(p) while training
///       o = p·v                               [B*H, T, D] -> [B, H, T, D]
///   y = merge_heads(o)·Wproj + bproj          [B, T, H, D] -> [B*T, C] -> [B*T, C]
///   y = dropout(y) while training with p > 0.
/// Parameters: "qkv.*" and "proj.*" (Linear or BlockSparseLinear parameters); with qk_norm also
/// "q_norm.gamma", "q_norm.beta", "k_norm.gamma", "k_norm.beta".
class MultiHeadAttention : public Module {
 public:
  /// ValueError/ShapeError naming the bad option (sizes, width % heads, layout, projections,
  /// dropout probabilities; AttentionImpl::dense with a layout that is not dense causal).
  explicit MultiHeadAttention(const AttentionOptions& options, Generator& gen = default_generator());

  /// x [B*T, C] -> [B*T, C]; ShapeError naming x, B, T and C when they do not fit. Dropout
  /// masks are drawn from `dropout_gen`.
  Tensor forward(const Tensor& x, int64_t batch, Generator& dropout_gen = default_generator()) const;

  /// Incremental decoding: x [B*n, C] holds n new positions cache.len .. cache.len+n-1 of each of
  /// B sequences (batch-major: row b*n + i); returns their outputs [B*n, C], as forward() gives
  /// them at those positions, and appends their keys and values to `cache`. A query at position p
  /// attends to the cached and new keys s <= p whose block (s / bs) its head's layout row (p / bs)
  /// keeps: scores q·kᵀ for all of them, -inf where the layout has no block, softmax, ·v (dense
  /// products over the cache: sums in another order than block_attention's, so outputs agree to
  /// rounding). No dropout: ValueError in training mode with dropout > 0 (call eval()), and when
  /// len + n passes seq_len; ShapeError when x or the cache does not fit.
  Tensor decode(const Tensor& x, int64_t batch, KVCache& cache) const;

  /// A probe of attention-logit growth: the largest logit scale·q·k of the last `rows` queries of
  /// one sequence x [T, C] over their causal keys (every key <= the query, whatever the layout
  /// keeps), per the current parameters, in f32. No graph is recorded under NoGradGuard.
  double max_logit(const Tensor& x, int64_t rows) const;

  const AttentionLayoutPtr& layout() const { return layout_; }
  /// {none, layout()}: what checkpoints save as this module's /layout/<path>.
  ModuleLayouts layouts() const override { return {nullptr, layout_}; }
  const Projection& qkv() const { return qkv_; }
  const Projection& proj() const { return proj_; }
  const AttentionOptions& options() const { return options_; }
  /// Whether forward() on tensors of `device` takes the dense path (matmul, causal_softmax,
  /// matmul) rather than block_attention: only with AttentionImpl::dense (the device does not matter).
  bool uses_dense_path(const Device& device) const;

 private:
  // x [B*n, C] -> the qkv projection [B*n, (H + 2·Hkv)·D] in the operand dtype (under autocast
  // cast once, here), its q and k columns layer-normed with qk_norm.
  Tensor project(const Tensor& x) const;
  // q, k, v [B, H, n, D] of x [B*n, C]: the qkv projection with the heads apart (forward's and
  // decode's; under autocast cast once, here).
  std::vector<Tensor> heads_apart(const Tensor& x, int64_t batch, int64_t n) const;
  // k or v [B, Hkv, n, D] as [B, H, n, D] (each key/value head repeated for its query heads; the
  // tensor itself without grouped-query attention): the dense path's and decode's products.
  Tensor all_heads(const Tensor& kv) const;
  // o [B, H, n, D] with the heads merged, [B*n, C], through the output projection.
  Tensor merge_heads(const Tensor& o, int64_t batch, int64_t n) const;

  AttentionOptions options_;
  AttentionLayoutPtr layout_;
  bool dense_causal_ = false;  // layout_ keeps every causal block
  Projection qkv_, proj_;
  std::shared_ptr<LayerNorm> q_norm_, k_norm_;  // qk_norm only
  std::shared_ptr<Dropout> drop_;
};

}  // namespace nn
}  // namespace tessera
