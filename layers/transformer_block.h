// nn::TransformerBlock: a pre-LayerNorm transformer block (GPT-2 style) with block-sparse
// attention and dense or block-sparse MLP weights.
//
//   nn::TransformerBlock blk(nn::TransformerBlockOptions(nn::AttentionOptions(256, 4,
//   128).layout(nn::AttentionLayoutKind::strided).stride(2))
//                                .mlp_ratio(4).activation(nn::Activation::gelu_tanh)
//                                .linear_block_size(32).density(0.25, /*seed=*/5),
//                            gen);
//   Tensor y = blk.forward(x, /*batch=*/B);   // x [B*128, 256] -> [B*128, 256]
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "layers/attention.h"
#include "layers/layer_norm.h"

namespace tessera {
namespace nn {

/// The MLP's nonlinearity: exact gelu, gelu with the tanh approximation, or x·σ(1.702x).
enum class Activation { gelu, gelu_tanh, fast_gelu };

/// "gelu", "gelu_tanh", "fast_gelu"; ValueError naming the string otherwise.
Activation activation_from_string(const std::string& name);
const char* activation_name(Activation a);
/// The activation applied to x (elementwise).
Tensor apply_activation(Activation a, const Tensor& x);
/// The activation with its result in dtype `out` (x's, or bf16/f16 for f32 x): gelu and
/// gelu_tanh write it directly (gelu(x, approx, out)); fast_gelu's f32 result is cast.
Tensor apply_activation(Activation a, const Tensor& x, DType out);

/// Options of TransformerBlock: the attention's options (width, heads, seq_len, layout, its
/// projections), the MLP (width ratio, activation, block size 0 = dense, density, layout seed:
/// fc uses `seed`, fc2 `seed + 1`), residual dropout, layer norm eps.
struct TransformerBlockOptions {
  explicit TransformerBlockOptions(AttentionOptions attention) : attn_(std::move(attention)) {}

  TransformerBlockOptions& attention(AttentionOptions a) { attn_ = std::move(a); return *this; }
  TransformerBlockOptions& mlp_ratio(int64_t r) { mlp_ratio_ = r; return *this; }
  TransformerBlockOptions& activation(Activation a) { activation_ = a; return *this; }
  TransformerBlockOptions& linear_block_size(int64_t bs) { linear_block_ = bs; return *this; }
  TransformerBlockOptions& density(double d, uint64_t seed = 0) { density_ = d; seed_ = seed; return *this; }
  /// Dropout on the MLP output while training (the attention's own dropouts, on its output and
  /// on its probabilities (AttentionOptions::attention_dropout), are in its options).
  TransformerBlockOptions& dropout(double p) { dropout_ = p; return *this; }
  TransformerBlockOptions& eps(double e) { eps_ = e; return *this; }

  const AttentionOptions& attention() const { return attn_; }
  int64_t width() const { return attn_.width(); }
  int64_t mlp_ratio() const { return mlp_ratio_; }
  Activation activation() const { return activation_; }
  int64_t linear_block_size() const { return linear_block_; }
  double density() const { return density_; }
  uint64_t seed() const { return seed_; }
  double dropout() const { return dropout_; }
  double eps() const { return eps_; }

 private:
  AttentionOptions attn_;
  int64_t mlp_ratio_ = 4;
  Activation activation_ = Activation::gelu;
  int64_t linear_block_ = 0;
  double density_ = 1.0;
  uint64_t seed_ = 0;
  double dropout_ = 0;
  double eps_ = 1e-5;
};

/// forward(x [B*T, C], B):
///   h = x + attn(ln1(x), B)
///   y = h + dropout(fc2(act(fc(ln2(h)))))     fc: [C, r·C], fc2: [r·C, C]
/// Under autocast (f32 x), ln1, ln2 and act, each read only by a product (qkv, fc, fc2) that
/// casts its f32 input to the autocast dtype, write that dtype directly: the same bits, no casts.
/// Parameters: "ln1.*", "attn.*", "ln2.*", "fc.*", "fc2.*".
class TransformerBlock : public Module {
 public:
  explicit TransformerBlock(const TransformerBlockOptions& options, Generator& gen = default_generator());

  /// x [B*T, C] -> [B*T, C]; dropout masks (p > 0, training) drawn from `dropout_gen`.
  Tensor forward(const Tensor& x, int64_t batch, Generator& dropout_gen = default_generator()) const;
  /// Incremental decoding: x [B*n, C], n new positions of B sequences (MultiHeadAttention::decode,
  /// whose keys and values go to `cache`) -> [B*n, C], as forward() at those positions. No dropout.
  Tensor decode(const Tensor& x, int64_t batch, KVCache& cache) const;

  const MultiHeadAttention& attention() const { return *attn_; }
  /// What the attention reads: ln1(x), f32 for f32 x (the probe of TransformerLM::max_attention_logits).
  Tensor attention_input(const Tensor& x) const { return ln1_->forward(x); }
  const Projection& fc() const { return fc_; }
  const Projection& fc2() const { return fc2_; }
  const TransformerBlockOptions& options() const { return options_; }

 private:
  // The block around `attention` (x -> attention(ln1(x))): forward's and decode's.
  Tensor apply(const Tensor& x, const std::function<Tensor(const Tensor&)>& attention, Generator& dropout_gen) const;

  TransformerBlockOptions options_;
  std::shared_ptr<LayerNorm> ln1_, ln2_;
  std::shared_ptr<MultiHeadAttention> attn_;
  Projection fc_, fc2_;
  std::shared_ptr<Dropout> drop_;
};

}  // namespace nn
}  // namespace tessera
