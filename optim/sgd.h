// Stochastic gradient descent with momentum, dampening, Nesterov and (L2) weight decay, as in
// PyTorch's torch.optim.SGD.
//
//   SGD opt(model.parameters(), SGDOptions(0.1).momentum(0.9).nesterov(true));
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

/// SGD hyperparameters with chainable setters; checked when the optimizer is made.
class SGDOptions {
 public:
  explicit SGDOptions(double lr) : lr_(lr) {}

  SGDOptions& lr(double v) { lr_ = v; return *this; }
  SGDOptions& momentum(double v) { momentum_ = v; return *this; }
  SGDOptions& dampening(double v) { dampening_ = v; return *this; }
  SGDOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  SGDOptions& nesterov(bool v) { nesterov_ = v; return *this; }

  double lr() const { return lr_; }
  double momentum() const { return momentum_; }
  double dampening() const { return dampening_; }
  double weight_decay() const { return weight_decay_; }
  bool nesterov() const { return nesterov_; }

  /// ValueError unless lr >= 0, momentum >= 0, weight_decay >= 0 (all finite), and nesterov
  /// comes with momentum > 0 and dampening == 0.
  void validate() const;

 private:
  double lr_;
  double momentum_ = 0.0;
  double dampening_ = 0.0;
  double weight_decay_ = 0.0;
  bool nesterov_ = false;
};

/// SGD over `params`; the update is the fused op sgd_update (see kernels/sgd_update).
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  /// Per-group weight decay (see optim/param_groups.h); options.weight_decay() for groups without one.
  SGD(const std::vector<ParamGroup>& groups, SGDOptions options);

  const SGDOptions& options() const { return options_; }

  /// The momentum buffers, one per parameter in params() order (zeros until the first step;
  /// kept, and left untouched, when momentum == 0).
  std::vector<Tensor> state() const override { return momentum_buffers_; }
  std::vector<std::string> state_names() const override { return {"momentum_buffer"}; }
  std::string name() const override { return "sgd"; }
  /// lr, momentum, dampening, weight_decay, nesterov (0/1).
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  /// {p <- p'} and, when momentum != 0, {buf <- buf'}.
  std::vector<Write> update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) override;

 private:
  SGDOptions options_;
  std::vector<Tensor> momentum_buffers_;
};

}  // namespace optim
}  // namespace tessera
