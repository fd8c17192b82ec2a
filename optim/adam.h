// Adam with L2-coupled weight decay (Kingma & Ba), as in PyTorch's torch.optim.Adam (amsgrad
// off): the decay term wd·p is added to the gradient before the moments, so it is rescaled by
// the adaptive denominator. For decoupled decay use AdamW.
//
//   Adam opt(model.parameters(), AdamOptions(1e-3).betas(0.9, 0.999).weight_decay(1e-4));
//   loss.backward();
//   opt.step();
//   opt.zero_grad();
#pragma once

#include <string>
#include <vector>

#include "optim/adam_family.h"

namespace tessera {
namespace optim {

struct AdamTag {
  static constexpr const char* kName = "Adam";
  static constexpr double kWeightDecay = 0.0;
};

/// Adam hyperparameters: lr (1e-3), betas (0.9, 0.999), eps (1e-8), weight_decay (0.0).
using AdamOptions = detail::AdamFamilyOptions<AdamTag>;

/// Adam over `params`; the update is the fused op adam_update with coupled decay (see kernels/adam_update).
/// State: exp_avg (m) and exp_avg_sq (v) per parameter, in the order of detail::AdamMoments.
class Adam : public detail::AdamMoments {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = AdamOptions());
  /// Per-group weight decay (see optim/param_groups.h); options.weight_decay() for groups without one.
  Adam(const std::vector<ParamGroup>& groups, AdamOptions options = AdamOptions());

  const AdamOptions& options() const { return options_; }
  std::string name() const override { return "adam"; }
  /// {p <- p', m <- m', v <- v'}.
  std::vector<Write> update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) override;
  /// The same with the gradient scale passed into the update op (no pass over the gradient).
  std::vector<Write> update_scaled(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step,
                                   const Tensor& grad_scale) override;

 private:
  AdamOptions options_;
};

}  // namespace optim
}  // namespace tessera
