// Adafactor (Shazeer & Stern 2018): Adam-like steps with a factored second moment. For a
// parameter of 2 or more dims [..., n, m] it keeps only running averages of g² + eps1 over
// each row and each column of every trailing matrix (n + m numbers instead of n·m, stored as
// one state tensor [..., n + m]); 1-D parameters keep a full average. β2 follows the schedule
// 1 - t^decay_rate (decay_rate = -0.8), every update is clipped to RMS(update) <=
// clip_threshold (d = 1), and the step size is lr or, with relative_step, min(1e-2, 1/sqrt(t)),
// optionally scaled by max(eps2, RMS(p)) (scale_parameter). No first moment. Weight decay is
// decoupled: p -= α·wd·p.
//
//   Adafactor opt(model.parameters(), AdafactorOptions(1e-2));
//   loss.backward();
//   opt.step();
//   opt.zero_grad();
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kernels/adafactor_update/adafactor_common.h"
#include "optim/optimizer.h"

namespace tessera {
namespace optim {

/// Adafactor hyperparameters with chainable setters; checked when the optimizer is made.
class AdafactorOptions {
 public:
  explicit AdafactorOptions(double lr = 1e-2) : lr_(lr) {}

  AdafactorOptions& lr(double v) { lr_ = v; return *this; }
  AdafactorOptions& eps(double eps1, double eps2) { a_.eps1 = eps1; a_.eps2 = eps2; return *this; }
  AdafactorOptions& clip_threshold(double v) { a_.clip_threshold = v; return *this; }
  AdafactorOptions& decay_rate(double v) { a_.decay_rate = v; return *this; }
  AdafactorOptions& weight_decay(double v) { a_.weight_decay = v; return *this; }
  AdafactorOptions& relative_step(bool v) { a_.relative_step = v; return *this; }
  AdafactorOptions& scale_parameter(bool v) { a_.scale_parameter = v; return *this; }
  /// Factor the second moment of parameters with 2 or more dims (default true).
  AdafactorOptions& factored(bool v) { factored_ = v; return *this; }

  double lr() const { return lr_; }
  double eps1() const { return a_.eps1; }
  double eps2() const { return a_.eps2; }
  double clip_threshold() const { return a_.clip_threshold; }
  double decay_rate() const { return a_.decay_rate; }
  double weight_decay() const { return a_.weight_decay; }
  bool relative_step() const { return a_.relative_step; }
  bool scale_parameter() const { return a_.scale_parameter; }
  bool factored() const { return factored_; }
  /// The update ops' attributes.
  const AdafactorAttrs& attrs() const { return a_; }

  /// ValueError unless lr >= 0, eps1, eps2 >= 0, clip_threshold > 0, decay_rate <= 0 and
  /// weight_decay >= 0 (all finite).
  void validate() const;

 private:
  double lr_;
  AdafactorAttrs a_;
  bool factored_ = true;
};

/// Adafactor over `params`; the updates are the fused ops adafactor_factored_update (2 or more
/// dims, unless factored(false)) and adafactor_update (otherwise).
class Adafactor : public Optimizer {
 public:
  Adafactor(std::vector<Tensor> params, AdafactorOptions options = AdafactorOptions());
  /// Per-group weight decay (see optim/param_groups.h); options.weight_decay() for groups without one.
  Adafactor(const std::vector<ParamGroup>& groups, AdafactorOptions options = AdafactorOptions());

  const AdafactorOptions& options() const { return options_; }
  /// Whether parameter i has a factored second moment.
  bool is_factored(size_t i) const { return factored_.at(i); }

  /// The second-moment estimate of every parameter, in params() order: for a factored
  /// parameter [..., n, m] a tensor [..., n + m] holding each matrix's n row averages followed by
  /// its m column averages; otherwise the full average (p's shape). Zeros before the first step.
  std::vector<Tensor> state() const override { return exp_avg_sq_; }
  std::vector<std::string> state_names() const override { return {"exp_avg_sq"}; }
  std::string name() const override { return "adafactor"; }
  /// lr, eps1, eps2, clip_threshold, decay_rate, weight_decay, relative_step, scale_parameter,
  /// factored (booleans as 0/1).
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  /// {p <- p', state <- state'}.
  std::vector<Write> update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) override;

 private:
  AdafactorOptions options_;
  std::vector<bool> factored_;
  std::vector<Tensor> exp_avg_sq_;  // [..., n + m] when factored, else p's shape
};

}  // namespace optim
}  // namespace tessera
