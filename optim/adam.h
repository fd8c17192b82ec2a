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
#include <utility>
#include <vector>

#include "optim/optimizer.h"

namespace tessera {
namespace optim {

/// Adam hyperparameters with chainable setters; checked when the optimizer is made.
class AdamOptions {
 public:
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}

  AdamOptions& lr(double v) { lr_ = v; return *this; }
  AdamOptions& betas(double b1, double b2) { beta1_ = b1; beta2_ = b2; return *this; }
  AdamOptions& eps(double v) { eps_ = v; return *this; }
  AdamOptions& weight_decay(double v) { weight_decay_ = v; return *this; }

  double lr() const { return lr_; }
  double beta1() const { return beta1_; }
  double beta2() const { return beta2_; }
  double eps() const { return eps_; }
  double weight_decay() const { return weight_decay_; }

  /// ValueError unless lr >= 0, 0 <= beta1, beta2 < 1, eps >= 0, weight_decay >= 0 (finite).
  void validate() const;

 private:
  double lr_;
  double beta1_ = 0.9;
  double beta2_ = 0.999;
  double eps_ = 1e-8;
  double weight_decay_ = 0.0;
};

/// Adam over `params`; the update is the fused op adam_update (see kernels/adam_update).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = AdamOptions());
  /// Per-group weight decay (see optim/param_groups.h); options.weight_decay() for groups without one.
  Adam(const std::vector<ParamGroup>& groups, AdamOptions options = AdamOptions());

  const AdamOptions& options() const { return options_; }

  /// First moments m of every parameter (params() order), then second moments v:
  /// {m_0, ..., m_{n-1}, v_0, ..., v_{n-1}}. Zeros before the first step.
  std::vector<Tensor> state() const override;
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  std::string name() const override { return "adam"; }
  /// lr, beta1, beta2, eps, weight_decay.
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  /// {p <- p', m <- m', v <- v'}.
  std::vector<Write> update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) override;

 private:
  AdamOptions options_;
  std::vector<Tensor> exp_avg_;     // m, one per parameter
  std::vector<Tensor> exp_avg_sq_;  // v, one per parameter
};

}  // namespace optim
}  // namespace tessera
