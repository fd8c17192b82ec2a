// Optimizers: the interface every optimizer implements, usable eagerly and inside a compiled
// training step (core/graph).
//
//   AdamW opt(params, AdamWOptions(1e-3).weight_decay(0.1));
//   loss.backward();
//   opt.step();        // eager: updates params in place from their .grad
//   opt.zero_grad();
//
// An optimizer's math lives in fused update ops (kernels/sgd_update, kernels/adam_update):
// `update()` applies them to one parameter and says which tensors receive which results. The
// eager step() copies the results into the parameters and state; a traced step records the
// same ops and the executor writes their outputs straight into the parameter and state
// buffers. Learning rate and step number are 0-d f64 tensors fed at every step, so schedules
// need no re-trace. Parameters and state are f32 (master weights) or f64.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/graph/updater.h"
#include "core/tensor.h"
#include "optim/param_groups.h"

namespace tessera {
namespace optim {

/// One write of an update (see ParamWrite in core/graph/updater.h).
using Write = ParamWrite;

class Optimizer : public ParamUpdater {
 public:
  Optimizer(std::vector<Tensor> params, double lr);
  /// Parameters from groups, in group order; a group's weight_decay (or else `weight_decay`)
  /// is the decay of each of its parameters. ValueError if a parameter is listed twice.
  Optimizer(const std::vector<ParamGroup>& groups, double lr, double weight_decay);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Eager update of every parameter that has a gradient; advances step_count() by one first
  /// (the update of step t uses t = step_count()). Runs update_scaled() one parameter at a time
  /// (only one parameter's results are held at once), with the clip factor update_all() uses;
  /// update_all() may batch parameters into one op (Adam, AdamW) that gives bitwise the same
  /// elements, so eager and compiled steps give bitwise the same numbers on the CPU.
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
  /// Weight decay of parameter i (from its group, or the options).
  double weight_decay(size_t i) const { return weight_decay_.at(i); }

  /// Global-norm clipping inside the update: every update (eager step() and compiled steps
  /// traced afterwards) first multiplies all gradients by clip_factor(global_grad_norm(grads),
  /// max_norm) (optim/clip_grad.h), computed with ops over every gradient of the step. .grad is
  /// left as it is. 0 turns clipping off (the default). Set it before compile(): a compiled
  /// step keeps the setting it was traced with. ValueError unless max_norm >= 0.
  void set_clip_norm(double max_norm);
  double clip_norm() const { return clip_norm_; }
  /// The global gradient norm (before clipping) of the last eager update that clipped; NaN when
  /// none has. A compiled step gives its own as the output optim::kGradNormOutput.
  double last_grad_norm() const;

  /// Every state tensor (e.g. momentum buffers), in a fixed order; for tracing and checkpoints.
  /// Optimizers with per-parameter state list it state-major: state()[k * params().size() + i]
  /// is state k (named state_names()[k]) of parameter i.
  std::vector<Tensor> state() const override = 0;
  /// Names of the per-parameter states, in state() order ({"exp_avg", "exp_avg_sq"}); names
  /// the datasets of checkpoints (/optimizer/<param path>/<state name>). Empty: no state.
  virtual std::vector<std::string> state_names() const { return {}; }
  /// Name of the algorithm ("sgd", "adamw"), stored in checkpoints.
  virtual std::string name() const { return "optimizer"; }
  /// Hyperparameters by name (lr included), stored in checkpoints; booleans as 0/1.
  virtual std::vector<std::pair<std::string, double>> hyperparameters() const { return {{"lr", lr_}}; }
  /// Sets the step counter (restoring a checkpoint); ValueError when negative.
  void set_step_count(int64_t step);
  /// The update of parameter `i` given its gradient, the learning rate and the (1-based) step
  /// number t as 0-d f64 tensors. Records no autograd (callers run it under NoGradGuard).
  std::vector<Write> update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) override = 0;
  /// update() with the gradient scaled by `grad_scale`, a 0-d f64 tensor (the clip factor;
  /// undefined: no scaling): bitwise update(i, scale_grad(grad, grad_scale), lr, step), which
  /// is what this default runs. Optimizers whose update op takes the scale itself (Adam, AdamW)
  /// override it and save the pass over the gradient.
  virtual std::vector<Write> update_scaled(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step,
                                           const Tensor& grad_scale);
  /// Updates of every parameter with a defined grads[i] (grads in params() order), clipped when
  /// set_clip_norm() is on; what a compiled step traces.
  std::vector<Write> update_all(const std::vector<Tensor>& grads, const Tensor& lr, const Tensor& step) override;

 protected:
  /// The clip factor of a step over `grads` (params() order) as a 0-d f64 tensor, made with
  /// ops from every gradient; undefined when clipping is off or no gradient is defined.
  /// ValueError unless there is one entry per parameter.
  Tensor step_clip_factor(const std::vector<Tensor>& grads);

  std::vector<Tensor> params_;
  std::vector<double> weight_decay_;  // per parameter
  double lr_;
  int64_t step_ = 0;
  double clip_norm_ = 0;

 private:
  Tensor last_grad_norm_;  // of the last eager update that clipped (0-d f64)
  // Calls fn(i, update_scaled(i, grads[i], lr, step, clip factor or none)) for each defined
  // gradient, in order.
  template <class Fn>
  void for_each_update(const std::vector<Tensor>& grads, const Tensor& lr, const Tensor& step, Fn&& fn);
};

}  // namespace optim
}  // namespace tessera
