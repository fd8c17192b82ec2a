// AdamW: Adam with decoupled weight decay (Loshchilov & Hutter), as in PyTorch's
// torch.optim.AdamW (amsgrad off).
//
//   AdamW opt(model.parameters(), AdamWOptions(3e-4).betas(0.9, 0.95).weight_decay(0.1));
//   loss.backward();
//   opt.step();
//   opt.zero_grad();
#pragma once

#include <string>
#include <vector>

#include "optim/adam_family.h"

namespace tessera {
namespace optim {

struct AdamWTag {
  static constexpr const char* kName = "AdamW";
  static constexpr double kWeightDecay = 0.01;
};

/// AdamW hyperparameters: lr (1e-3), betas (0.9, 0.999), eps (1e-8), weight_decay (0.01).
using AdamWOptions = detail::AdamFamilyOptions<AdamWTag>;

/// AdamW over `params`; the update is the fused op adam_update with decoupled decay (see kernels/adam_update).
/// State: exp_avg (m) and exp_avg_sq (v) per parameter, in the order of detail::AdamMoments.
class AdamW : public detail::AdamMoments {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = AdamWOptions());
  /// Per-group weight decay (see optim/param_groups.h); options.weight_decay() for groups without one.
  AdamW(const std::vector<ParamGroup>& groups, AdamWOptions options = AdamWOptions());

  const AdamWOptions& options() const { return options_; }
  std::string name() const override { return "adamw"; }
  /// {p <- p', m <- m', v <- v'}.
  std::vector<Write> update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) override;
  /// The same with the gradient scale passed into the update op (no pass over the gradient).
  std::vector<Write> update_scaled(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step,
                                   const Tensor& grad_scale) override;

 private:
  AdamWOptions options_;
};

}  // namespace optim
}  // namespace tessera
