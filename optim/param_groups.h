// Parameter groups: sets of parameters with their own weight decay.
//
//   // decay on weights only: biases, norms, gains and embeddings get none
//   AdamW opt(optim::param_groups_default(model.named_parameters(), 0.1), AdamWOptions(3e-4));
//
//   // or by hand: a group without a value takes the optimizer's weight_decay
//   SGD opt({{{w1, w2}}, {{b1, b2}, 0.0}}, SGDOptions(0.1).weight_decay(1e-4));
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/graph/named_param.h"
#include "core/tensor.h"

namespace tessera {
namespace optim {

/// Parameters sharing one weight decay; unset: the optimizer options' weight_decay.
struct ParamGroup {
  ParamGroup(std::vector<Tensor> params_, std::optional<double> weight_decay_ = std::nullopt)  // NOLINT
      : params(std::move(params_)), weight_decay(weight_decay_) {}

  std::vector<Tensor> params;
  std::optional<double> weight_decay;
};

/// The default no-decay rule, on a dotted parameter path ("blocks.0.ln1.gamma"): true when
/// - the last component is "bias", "gamma", "beta", "gain" or "g", or starts with "bias_",
///   "gamma_", "beta_" or "gain_" (e.g. the LSTM's "gamma_x"), or
/// - any component contains "norm" ("norm", "sparse_norm", "layernorm"), starts with "emb"
///   or contains "_emb" ("embed", "embedding", "tok_emb", "pos_emb"), or is "ln" or "ln"
///   followed by a digit or '_' ("ln1", "ln_f").
/// Everything else (weights, block-sparse weights and their gates) is decayed.
bool no_weight_decay(const std::string& path);

/// Two groups in the parameters' order: {decayed, weight_decay} then {the rest, 0}; a group
/// with no parameters is left out.
std::vector<ParamGroup> param_groups_default(const std::vector<graph::NamedParam>& params, double weight_decay);

}  // namespace optim
}  // namespace tessera
