// Two small language models written directly with tessera's ops, for benchmarks, examples and
// tests that need a realistic training step (eager or compiled) without the layers library.
//
//   Generator gen(1);
//   bench::LstmLm model(bench::LstmLmConfig{}, gen);         // batch 32, seq 64, hidden 256, vocab 256
//   Tensor ids = bench::random_tokens(64 * 32, 256, 1);       // i32 [seq*batch], time-major
//   Tensor loss = model.loss(ids, bench::random_tokens(64 * 32, 256, 2));
//   loss.backward();
//
// Both models' loss functions are traceable (they only run ops), so they can be handed to
// compile() with named_parameters(). Parameters are f32 on the CPU, weights drawn from
// normal(0, 0.02) with the given generator, biases zero, layer-norm gains one.
#pragma once

#include <cstdint>
#include <vector>

#include "core/graph/trace.h"
#include "core/random.h"
#include "core/tensor.h"

namespace tessera {
namespace bench {

struct LstmLmConfig {
  int64_t batch = 32;
  int64_t seq = 64;
  int64_t hidden = 256;  ///< also the embedding width
  int64_t vocab = 256;
};

/// A one-layer byte LSTM language model:
///   x = embedding(ids)                                   // [T*B, H]
///   per step t: gates = x_t·Wx + h·Wh + b                // [B, 4H], split into i, f, o, u
///               c = σ(f)·c + σ(i)·tanh(u);  h = σ(o)·tanh(c)
///   logits = concat(h_0..h_{T-1})·Wout + bout            // [T*B, V]
///   loss = cross_entropy(logits, targets)
/// h and c start at zero (the first step skips h·Wh and f·c, which are zero). Forget-gate bias 1.
class LstmLm {
 public:
  using Config = LstmLmConfig;
  LstmLm(const LstmLmConfig& cfg, Generator& gen);

  /// Mean next-token loss. ids, targets: i32 [seq*batch], time-major (row t*batch + b is
  /// sequence b at time t); the batch is ids' length / seq.
  /// With recompute_chunk > 0, every chunk of that many time steps is a graph::recompute region.
  Tensor loss(const Tensor& ids, const Tensor& targets, int64_t recompute_chunk = 0) const;

  const LstmLmConfig& config() const { return cfg_; }
  /// "embed", "lstm.wx", "lstm.wh", "lstm.bias", "out.weight", "out.bias".
  std::vector<graph::NamedParam> named_parameters() const;
  std::vector<Tensor> parameters() const;

 private:
  LstmLmConfig cfg_;
  Tensor embed_;      // [V, H]
  Tensor wx_, wh_;    // [H, 4H] each; gate order i, f, o, u
  Tensor bias_;       // [4H]
  Tensor wout_;       // [H, V]
  Tensor bout_;       // [V]
};

struct TransformerLmConfig {
  int64_t batch = 16;
  int64_t seq = 64;
  int64_t width = 256;
  int64_t heads = 4;
  int64_t layers = 2;
  int64_t vocab = 256;
  int64_t mlp_ratio = 4;
};

/// A pre-LN GPT-style transformer language model with learned position embeddings:
///   x = tok_emb[ids] + pos_emb                                    // [B*T, C]
///   per block: x = x + proj(causal_attention(ln1(x)));  x = x + mlp(ln2(x))
///   loss = cross_entropy(ln_f(x)·Wout, targets)
/// Attention is written with ops: qkv projection, reshape/permute into heads, scaled scores
/// plus a constant causal mask (0 / -1e9), softmax, weighted sum, heads merged back.
class TransformerLm {
 public:
  using Config = TransformerLmConfig;
  TransformerLm(const TransformerLmConfig& cfg, Generator& gen);

  /// Mean next-token loss. ids, targets: i32 [batch*seq], batch-major (row b*seq + t); the
  /// batch is ids' length / seq. With `recompute_blocks`, each block is a recompute region
  /// (graph::recompute): a compiled step recomputes its activations during backward instead
  /// of keeping them. Eagerly it changes nothing.
  Tensor loss(const Tensor& ids, const Tensor& targets, bool recompute_blocks = false) const;

  const TransformerLmConfig& config() const { return cfg_; }
  /// "tok_emb", "pos_emb", "blocks.<i>.ln1.weight", "blocks.<i>.attn.qkv.weight", ...,
  /// "ln_f.weight", "ln_f.bias", "out.weight".
  std::vector<graph::NamedParam> named_parameters() const;
  std::vector<Tensor> parameters() const;

 private:
  struct Block {
    Tensor ln1_w, ln1_b;   // [C]
    Tensor qkv_w, qkv_b;   // [C, 3C], [3C]
    Tensor proj_w, proj_b; // [C, C], [C]
    Tensor ln2_w, ln2_b;   // [C]
    Tensor fc_w, fc_b;     // [C, 4C], [4C]
    Tensor fc2_w, fc2_b;   // [4C, C], [C]
  };
  Tensor block_forward(const Block& blk, const Tensor& x, int64_t batch) const;

  TransformerLmConfig cfg_;
  Tensor tok_emb_;     // [V, C]
  Tensor pos_emb_;     // [T, C]
  std::vector<Block> blocks_;
  Tensor lnf_w_, lnf_b_;
  Tensor out_w_;       // [C, V]
  Tensor causal_mask_; // [T, T]: 0 where key <= query, -1e9 above the diagonal (a constant)
};

/// `n` token ids drawn uniformly from [0, vocab): i32 [n], the same for the same seed.
Tensor random_tokens(int64_t n, int64_t vocab, uint64_t seed);

}  // namespace bench
}  // namespace tessera
