// models::ConvLM: a character-level causal convolutional language model with block-sparse channels
// (nn::BlockSparseConv) and edge bias at the left edge (nn::EdgeBias), buildable from JSON.
//
//   auto cfg = models::ConvLMConfig::from_json({{"vocab", 65}, {"seq_len", 128}, {"width", 256},
//                                               {"layers", 6}, {"block_size", 32}, {"density", 0.25}});
//   models::ConvLM model(cfg);
//   Tensor loss = model.loss(ids, targets, /*batch=*/B);   // ids, targets i32 [B*seq_len], batch-major
//
// The network: token embedding [vocab, width]; `layers` residual blocks
//   x += gelu(edge_l(conv_l(ln_l(x))))
// where conv_l is a causal 1-D convolution width → width with `kernel` taps at dilation
// 2^(l mod dilation_cycle) (block-sparse channels at `density`, weight-normalized per output channel)
// and edge_l the edge bias of its first (kernel − 1)·dilation positions (which read the causal
// padding); then a final layer norm and a linear read-out [width, vocab]. Position t sees tokens
// t − receptive_field() + 1 … t.
//
// Config fields (all optional except vocab; unknown fields are errors naming the field):
//   vocab            token count                                     (required, > 0)
//   seq_len          T, tokens per window                             (128; > 0)
//   width            channels C                                       (128; a multiple of block_size)
//   layers           residual conv blocks                             (4; > 0)
//   kernel           taps per convolution                             (3; >= 2)
//   dilation_cycle   dilations 1, 2, 4, … 2^(cycle−1), repeated       (4; 1-16)
//   block_size       channel block size 8/16/32/64                    (32)
//   density          block density of the conv channels, (0, 1]       (1: dense)
//   edge_bias        the edge-bias layers                             (true)
//   seed             init and layout seed, >= 0                       (0)
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "layers/layers.h"

namespace tessera {
namespace models {

struct ConvLMConfig {
  int64_t vocab = 0;
  int64_t seq_len = 128;
  int64_t width = 128;
  int64_t layers = 4;
  int64_t kernel = 3;
  int64_t dilation_cycle = 4;
  int64_t block_size = 32;
  double density = 1.0;
  bool edge_bias = true;
  int64_t seed = 0;

  /// Reads and validates every field; ValueError naming the field (unknown fields included).
  static ConvLMConfig from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;
  void validate() const;
  /// The dilation of block l: 2^(l mod dilation_cycle).
  int64_t dilation(int64_t l) const { return int64_t{1} << (l % dilation_cycle); }
  /// Tokens a position sees, itself included: 1 + Σ_l (kernel − 1)·dilation(l).
  int64_t receptive_field() const;
};

class ConvLM : public nn::Module {
 public:
  explicit ConvLM(const ConvLMConfig& config);

  /// ids i32 [B*seq_len] (batch-major: window b is rows b·T … b·T + T − 1) -> logits [B*seq_len, vocab].
  /// ShapeError when ids is not B whole windows.
  Tensor logits(const Tensor& ids, int64_t batch) const;
  /// The mean cross entropy of logits(ids) against targets (i32, ids' element count).
  Tensor loss(const Tensor& ids, const Tensor& targets, int64_t batch) const;
  int64_t receptive_field() const { return config_.receptive_field(); }

  const ConvLMConfig& config() const { return config_; }
  const nn::BlockSparseConv& conv(size_t l) const { return *conv_.at(l); }

 private:
  ConvLMConfig config_;
  std::shared_ptr<nn::Embedding> embed_;
  std::vector<std::shared_ptr<nn::LayerNorm>> norm_;
  std::vector<std::shared_ptr<nn::BlockSparseConv>> conv_;
  std::vector<std::shared_ptr<nn::EdgeBias>> edge_;
  std::shared_ptr<nn::LayerNorm> norm_f_;
  std::shared_ptr<nn::Linear> out_;
};

}  // namespace models
}  // namespace tessera
