// AdamW: Adam with decoupled weight decay (Loshchilov & Hutter), as in PyTorch's
// torch.optim.AdamW (amsgrad off).
//
//   AdamW opt(model.parameters(), AdamWOptions(3e-4).betas(0.9, 0.95).weight_decay(0.1));
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

/// AdamW hyperparameters with chainable setters; checked when the optimizer is made.
class AdamWOptions {
 public:
  explicit AdamWOptions(double lr = 1e-3) : lr_(lr) {}

  AdamWOptions& lr(double v) { lr_ = v; return *this; }
  AdamWOptions& betas(double b1, double b2) { beta1_ = b1; beta2_ = b2; return *this; }
  AdamWOptions& eps(double v) { eps_ = v; return *this; }
  AdamWOptions& weight_decay(double v) { weight_decay_ = v; return *this; }

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
  double weight_decay_ = 0.01;
};

/// AdamW over `params`; the update is the fused op adamw_update (see kernels/adamw_update).
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = AdamWOptions());
  /// Per-group weight decay (see optim/param_groups.h); options.weight_decay() for groups without one.
  AdamW(const std::vector<ParamGroup>& groups, AdamWOptions options = AdamWOptions());

  const AdamWOptions& options() const { return options_; }

  /// First moments m of every parameter (params() order), then second moments v:
  /// {m_0, ..., m_{n-1}, v_0, ..., v_{n-1}}. Zeros before the first step.
  std::vector<Tensor> state() const override;
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  std::string name() const override { return "adamw"; }
  /// lr, beta1, beta2, eps, weight_decay.
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  /// {p <- p', m <- m', v <- v'}.
  std::vector<Write> update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) override;

 private:
  AdamWOptions options_;
  std::vector<Tensor> exp_avg_;     // m, one per parameter
  std::vector<Tensor> exp_avg_sq_;  // v, one per parameter
};

}  // namespace optim
}  // namespace tessera
