// models::CharLSTMLM: a byte/char language model: Embedding -> stacked (m)LSTM layers (dense or
// block-sparse) -> optional final (sparse) layer norm -> output Linear. Buildable from JSON.
//
//   auto cfg = models::CharLSTMLMConfig::from_json(nlohmann::json::parse(R"({
//       "embed": 64, "hidden": 512, "layers": 2, "block_size": 32, "density": 0.25,
//       "layout": "ba", "multiplicative": true, "final_norm": "sparse", "norm_segments": 16})"));
//   models::CharLSTMLM model(cfg);
//   models::CharLSTMLM::State state;                        // empty: zeros
//   for (...) {                                             // ids, targets i32 [T, B], time-major
//     auto out = model.loss(ids, targets, state);
//     out.loss.backward();  opt.step();  opt.zero_grad();
//     state = models::CharLSTMLM::detach(out.state);        // truncated BPTT
//   }
//
// Config fields (all optional; unknown fields are errors naming the field):
//   vocab           token count                                    (256; > 0)
//   embed           embedding width                                (64; a multiple of block_size)
//   hidden          LSTM width H                                   (256; a multiple of block_size)
//   layers          stacked LSTM layers                            (1; > 0)
//   block_size      0 = dense weights, else 8/16/32/64             (0)
//   density         block density of the LSTM weights, (0, 1]      (1; must be 1 with layout "dense")
//   layout          per-gate layout of the LSTM weights:           ("dense"; others need block_size > 0)
//                   "dense" | "random" | "ba" | "ws" | "balanced"
//   multiplicative  mLSTM layers                                   (false)
//   layer_norm      layer-normalized gate pre-activations          (false)
//   forget_bias     added to the forget gate                       (1.0)
//   final_norm      "none" | "layer" | "sparse"                    ("none")
//   norm_segments   groups of the "sparse" final norm; divides H   (1)
//   recompute_chunk > 0: each run of this many time steps a graph::recompute region in
//                   compiled steps (activation checkpointing; no effect eagerly), >= 0  (0: off)
//   seed            init and layout seed, >= 0                     (0)
//   cudnn           each layer's sequence as one cudnn_lstm op (cuDNN on the GPU, its reference
//                   kernel on the CPU), the same parameters; plain dense LSTMs only (block_size 0,
//                   no multiplicative, layer_norm or recompute_chunk)  (false)
//
// Layouts (see nn::LSTMOptions: each is a per-gate [in, H] pattern tiled over the 4 gates; the
// mLSTM weights use the same patterns) on a grid of R = in/bs rows and N = H/bs columns:
//   random    random_layout(density)
//   ba        Barabási–Albert with m = clamp(round(density·N/2), 1, N-1)  (≈ 2m links per node)
//   ws        Watts–Strogatz with k the even number nearest density·N (2 <= k < N), p = 0.25
//   balanced  balanced_random_layout with clamp(round(density·R), 1, R) blocks per column
// ba/ws need a square grid of N >= 3 blocks and balanced a whole blocks-per-row count; a weight
// where that does not hold (e.g. the first layer's input weight when embed != hidden) uses the
// random layout of the same density. Layer l draws its layouts from seeds 1000·seed + 2l (+1).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "layers/layers.h"
#include "layers/lstm.h"

namespace tessera {
namespace models {

/// The config of CharLSTMLM; see the file comment for each field and its default.
struct CharLSTMLMConfig {
  int64_t vocab = 256;
  int64_t embed = 64;
  int64_t hidden = 256;
  int64_t layers = 1;
  int64_t block_size = 0;
  double density = 1.0;
  std::string layout = "dense";
  bool multiplicative = false;
  bool layer_norm = false;
  double forget_bias = 1.0;
  std::string final_norm = "none";
  int64_t norm_segments = 1;
  int64_t recompute_chunk = 0;
  int64_t seed = 0;
  bool cudnn = false;

  /// Reads and validates every field; ValueError naming the field (unknown fields included).
  static CharLSTMLMConfig from_json(const nlohmann::json& j);
  /// Every field, so that from_json(to_json()) gives the same config.
  nlohmann::json to_json() const;
  /// The checks of from_json on this config (ValueError naming the field).
  void validate() const;
};

class CharLSTMLM : public nn::Module {
 public:
  /// One LSTMState per layer; empty means zeros.
  using State = std::vector<nn::LSTMState>;
  struct Output {
    Tensor logits;  ///< [T*B, vocab]
    Tensor loss;    ///< mean cross entropy [] (loss() only)
    State state;    ///< the final state of every layer
  };

  /// Validates the config; parameters drawn from Generator(seed).
  explicit CharLSTMLM(const CharLSTMLMConfig& config);

  /// ids i32 [T, B] (time-major), or [T*B] with B from the state or `batch` -> logits [T*B, vocab]
  /// and the final state.
  Output forward(const Tensor& ids, const State& state = {}, int64_t batch = 0) const;
  /// forward(ids) and the mean cross entropy of its logits against targets (i32, ids' element
  /// count, same order).
  Output loss(const Tensor& ids, const Tensor& targets, const State& state = {}, int64_t batch = 0) const;

  /// The state without autograd history (carry it to the next batch).
  static State detach(const State& s);

  const CharLSTMLMConfig& config() const { return config_; }
  const nn::LSTM& layer(size_t i) const { return *lstm_.at(i); }

 private:
  CharLSTMLMConfig config_;
  std::shared_ptr<nn::Embedding> embed_;
  std::vector<std::shared_ptr<nn::LSTM>> lstm_;
  std::shared_ptr<nn::LayerNorm> norm_;
  std::shared_ptr<nn::SparseLayerNorm> sparse_norm_;
  std::shared_ptr<nn::Linear> out_;
};

}  // namespace models
}  // namespace tessera
