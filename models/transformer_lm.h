// models::TransformerLM: a GPT-style (pre-LayerNorm) transformer language model with block-sparse
// attention layouts and optionally block-sparse weights, buildable from a JSON config.
//
//   auto cfg = models::TransformerLMConfig::from_json(nlohmann::json::parse(R"({
//       "vocab": 256, "seq_len": 128, "width": 256, "layers": 4, "heads": 4,
//       "attn_layout": "strided", "stride": 2, "linear_block": 32, "density": 0.25})"));
//   models::TransformerLM model(cfg);
//   Tensor loss = model.loss(ids, targets, /*batch=*/B);   // ids, targets i32 [B*128], batch-major
//
// Config fields (all optional except vocab; unknown fields are errors):
//   vocab            token count                                   (required, > 0)
//   seq_len          T, tokens per sequence                         (256; a multiple of attn_block)
//   width            C, model width                                 (256; a multiple of heads)
//   layers, heads    blocks, attention heads                        (4, 4)
//   mlp_ratio        MLP hidden width / C                           (4)
//   activation       "gelu" | "gelu_tanh" | "fast_gelu"             ("gelu")
//   attn_block       attention block size: 8, 16, 32, 64, 128       (32)
//   attn_layout      "dense" | "local" | "fixed" | "strided"        ("dense")
//   window           local: blocks seen, itself included            (4)
//   stride, summary  fixed/strided: stride blocks; fixed: summary   (4, 1; 1 <= summary <= stride)
//   linear_block     0 = dense weights, else 8/16/32/64 block-sparse qkv/proj/fc/fc2 (0; divides width)
//   density          block-sparse weight density in (0, 1]          (1)
//   tied             output projection = token embedding transposed  (true)
//   dropout          p in [0, 1) on embeddings, attention and MLP outputs (0; compiled: pass dropout_gen as compile()'s rng)
//   attention_dropout p in [0, 1) on the attention probabilities, any attn_layout (0)
//   qk_norm          LayerNorm on the queries and keys (OLMo 2's QK-norm; bounds the logits) (false)
//   attn_impl        "auto": block_attention (fused) for every layout; "dense": matmul, causal_softmax,
//                    dropout, matmul (attn_layout "dense" only; a reference for measurements)   ("auto")
//   recompute        each block a graph::recompute region           (false)
//   seed             parameter init and sparse-layout seed, >= 0    (0)
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "layers/layers.h"

namespace tessera {
namespace models {

/// The config of TransformerLM; see the file comment for each field and its default.
struct TransformerLMConfig {
  int64_t vocab = 0;
  int64_t seq_len = 256;
  int64_t width = 256;
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t mlp_ratio = 4;
  std::string activation = "gelu";
  int64_t attn_block = 32;
  std::string attn_layout = "dense";
  int64_t window = 4;
  int64_t stride = 4;
  int64_t summary = 1;
  int64_t linear_block = 0;
  double density = 1.0;
  bool tied = true;
  double dropout = 0.0;
  double attention_dropout = 0.0;
  bool qk_norm = false;
  std::string attn_impl = "auto";
  bool recompute = false;
  int64_t seed = 0;

  /// Reads and validates a config. ValueError naming the field: a wrong type, a bad value, an
  /// inconsistent pair (e.g. "width": 100 with "heads": 3), or an unknown field.
  static TransformerLMConfig from_json(const nlohmann::json& j);
  /// Every field, so from_json(to_json()) gives the same config.
  nlohmann::json to_json() const;
  /// The checks of from_json on this config.
  void validate() const;
};

/// logits(ids [B*T], B):
///   x = tok_emb[ids] + pos_emb           [B, T, C] (pos_emb [T, C] broadcast over B) -> [B*T, C]
///   x = block_l(x) for each layer        (pre-LN blocks, nn::TransformerBlock)
///   logits = ln_f(x)·W_out               [B*T, V]; tied: W_out = tok_embᵀ, else "out.weight" [C, V]
///   (under autocast ln_f writes the product's bf16/f16 operand directly, as the blocks do)
/// loss = mean cross entropy of the logits against targets.
/// Parameters: "tok_emb.weight", "pos_emb", "blocks.<l>.{ln1,attn.qkv,attn.proj,ln2,fc,fc2}.*",
/// "ln_f.gamma", "ln_f.beta", "out.weight" (untied only); with qk_norm
/// "blocks.<l>.attn.{q_norm,k_norm}.{gamma,beta}". Initialized from Generator(seed).
class TransformerLM : public nn::Module {
 public:
  /// Validates `cfg` (ValueError naming the field) and builds the parameters.
  explicit TransformerLM(const TransformerLMConfig& cfg);

  /// ids i32 [B*T] batch-major (row b*T + t) -> logits [B*T, V]. Dropout masks (training,
  /// dropout > 0) are drawn from `dropout_gen`.
  Tensor logits(const Tensor& ids, int64_t batch, Generator& dropout_gen = default_generator()) const;
  /// Mean next-token cross entropy: a scalar. targets i32 [B*T] like ids.
  Tensor loss(const Tensor& ids, const Tensor& targets, int64_t batch,
              Generator& dropout_gen = default_generator()) const;

  /// A probe of attention-logit growth: per layer, MultiHeadAttention::max_logit of the last
  /// `rows` queries of one sequence ids i32 [T] (f32, whatever autocast says; no dropout). Call it
  /// under NoGradGuard in eval mode.
  std::vector<double> max_attention_logits(const Tensor& ids, int64_t rows) const;

  /// Incremental decoding (generation with a key/value cache): the keys and values of every
  /// layer for the positions fed so far, of `batch` sequences.
  struct DecodeState {
    int64_t batch = 0;
    int64_t len = 0;  ///< positions fed so far (<= seq_len)
    std::vector<nn::KVCache> layers;
  };
  /// An empty state for `batch` sequences (ValueError for batch < 1).
  DecodeState start_decoding(int64_t batch) const;
  /// Feeds ids i32 [B*n] (n tokens per sequence, batch-major: row b*n + i) at positions
  /// state.len .. state.len+n-1 and returns their logits [B*n, V], as logits() gives them at those
  /// positions (to rounding: the attention sums run in another order); state.len += n. The
  /// positions are those of one window of seq_len tokens: when len + n would pass seq_len, a
  /// ValueError says so; start a new state and feed again what should stay (`sample` keeps the
  /// last half of the window). Needs eval() when dropout > 0.
  Tensor decode(const Tensor& ids, int64_t n, DecodeState& state) const;

  const TransformerLMConfig& config() const { return cfg_; }
  const nn::TransformerBlock& block(int64_t l) const;
  /// The attention layout every block uses.
  const AttentionLayoutPtr& attention_layout() const { return layout_; }

 private:
  class Blocks;

  TransformerLMConfig cfg_;
  AttentionLayoutPtr layout_;
  std::shared_ptr<nn::Embedding> tok_emb_;
  Tensor pos_emb_;  // [T, C]
  std::shared_ptr<Blocks> blocks_;
  std::shared_ptr<nn::LayerNorm> ln_f_;
  std::shared_ptr<nn::Linear> out_;  // null when tied
  std::shared_ptr<nn::Dropout> drop_;
};

}  // namespace models
}  // namespace tessera
