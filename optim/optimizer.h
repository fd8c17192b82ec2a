// Optimizers: the interface every optimizer implements, usable eagerly and inside a compiled
// training step (core/graph).
//
//   AdamW opt(params, AdamWOptions(1e-3).weight_decay(0.1));
//   loss.backward();
//   opt.step();        // eager: updates params in place from their .grad
//   opt.zero_grad();
//
// An optimizer's math lives in fused update ops (kernels/sgd_update, kernels/adamw_update):
// `update()` applies them to one parameter and says which tensors receive which results. The
// eager step() copies the results into the parameters and state; a traced step records the
// same ops and the executor writes their outputs straight into the parameter and state
// buffers. Learning rate and step number are 0-d f64 tensors fed at every step, so schedules
// need no re-trace. Parameters and state are f32 (master weights) or f64.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/graph/updater.h"
#include "core/tensor.h"

namespace tessera {
namespace optim {

/// One write of an update (see ParamWrite in core/graph/updater.h).
using Write = ParamWrite;

class Optimizer : public ParamUpdater {
 public:
  Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Eager update of every parameter that has a gradient; advances step_count() by one first
  /// (the update of step t uses t = step_count()).
  void step();
  /// Drops every parameter's gradient.
  void zero_grad();

  double lr() const override { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  /// Number of steps taken (eager step() calls plus executor steps reported via advance()).
  int64_t step_count() const override { return step_; }
  /// Advances the step counter without updating (the executor's steps).
  void advance() override { ++step_; }
  const std::vector<Tensor>& params() const override { return params_; }

  /// Every state tensor (e.g. momentum buffers), in a fixed order; for tracing and checkpoints.
  std::vector<Tensor> state() const override = 0;
  /// The update of parameter `i` given its gradient, the learning rate and the (1-based) step
  /// number t as 0-d f64 tensors. Records no autograd (callers run it under NoGradGuard).
  std::vector<Write> update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) override = 0;

 protected:
  std::vector<Tensor> params_;
  double lr_;
  int64_t step_ = 0;
};

}  // namespace optim
}  // namespace tessera
