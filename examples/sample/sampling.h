// Next-token sampling for the `sample` program: temperature, top-k and a seeded draw.
//
//   tessera::Generator gen(seed);
//   int32_t id = examples::sample_token(logits, {/*temperature=*/0.8, /*top_k=*/40}, gen);
//
// The distribution over V tokens with logits l (sampling_probabilities):
//   K = the top_k largest logits (all V when top_k is 0 or >= V; ties broken by the lower id)
//   p_i = exp((l_i - max l) / T) / Σ_{j∈K} exp((l_j - max l) / T)   for i in K, else 0
// Temperature 0 is greedy: p = 1 at the first largest logit. sample_token draws u ~ U[0, 1) from
// `gen` (one f64 draw per token, none when greedy) and returns the first id whose cumulative
// probability exceeds u, so the same seed gives the same tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace tessera {
namespace examples {

struct SamplingOptions {
  double temperature = 1.0;  ///< > 0 softens (> 1) or sharpens (< 1) the distribution; 0 = greedy
  int64_t top_k = 0;         ///< keep only the k most likely tokens; 0 = all
};

/// The distribution above, one probability per logit (summing to 1). ValueError for empty logits,
/// a non-finite logit, a negative or non-finite temperature or a negative top_k.
std::vector<double> sampling_probabilities(const std::vector<float>& logits, const SamplingOptions& opts);

/// One token id drawn from sampling_probabilities(logits, opts) with `gen`.
int32_t sample_token(const std::vector<float>& logits, const SamplingOptions& opts, Generator& gen);

/// `count` tokens after the token `first` from a causal model that reads whole windows of T tokens
/// (the trainers' samples of train_transformer and train_conv): each drawn with sample_token from
/// the row n−1 of logits_of(window) [T, V], where window i32 [T] (on the CPU) holds the last n ≤ T
/// tokens of the context at positions 0 … n−1 and zeros after them. A causal model's logits at
/// n−1 depend on the context alone. Returns the drawn ids.
std::vector<int32_t> sample_causal_windows(const std::function<Tensor(const Tensor& window)>& logits_of, int64_t T,
                                           int32_t first, int64_t count, const SamplingOptions& opts,
                                           Generator& gen);

}  // namespace examples
}  // namespace tessera
