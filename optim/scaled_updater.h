// Dynamic loss scaling inside a compiled step (f16 training): a ParamUpdater that wraps an
// optimizer. The step's loss function multiplies its loss by a fed 0-d f32 input, the loss
// scale, and hands that input over; the traced update then
//   g' = g / scale                              (every gradient)
//   finite = global_norm(g') < inf              (false for any inf or NaN element)
//   each write of the optimizer (parameters, state) = where(finite, new value, old value)
// so an overflowing step changes nothing, with no host decision inside the step. The output
// "grads_finite" (0-d f32: 1 = updated, 0 = skipped) tells the host, which moves the scale
// (optim::LossScaler::update) and feeds the next step's. A skipped step still counts as a step
// (the optimizer's step counter advances), the rule of optim/loss_scaler.h that
// LossScaler::step follows eagerly.
//
//   optim::LossScaler scaler;
//   optim::ScaledUpdater scaled(opt);
//   auto loss_fn = [&](const std::map<std::string, Tensor>& in) {
//     autocast::Guard amp(DType::f16);
//     return scaled.scale_loss(model.loss(in.at("x"), in.at("y")), in.at(optim::ScaledUpdater::kScaleInput));
//   };
//   CompiledStep step = compile(loss_fn, params, &scaled, {{"x", x}, {"y", y}, scaled.feed(scaler)});
//   double loss = step.run({{"x", x}, {"y", y}, scaled.feed(scaler)}) / scaler.scale();
//   scaler.update(step.fetch("grads_finite").item<float>() == 0);
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/graph/updater.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"

namespace tessera {
namespace optim {

class ScaledUpdater : public ParamUpdater {
 public:
  /// The name of the fed loss-scale input.
  static constexpr const char* kScaleInput = "loss_scale";

  explicit ScaledUpdater(Optimizer& opt) : opt_(opt) {}

  /// loss · scale, remembering `scale` (the step's fed kScaleInput) for the update.
  Tensor scale_loss(const Tensor& loss, const Tensor& scale);
  /// The feed of the loss scale: {kScaleInput, 0-d f32 scaler.scale()}.
  static std::pair<const std::string, Tensor> feed(const LossScaler& scaler);

  const std::vector<Tensor>& params() const override { return opt_.params(); }
  std::vector<Tensor> state() const override { return opt_.state(); }
  /// Not used by compiled steps (they call update_all); ValueError.
  std::vector<ParamWrite> update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) override;
  /// The guarded update of the file comment; ValueError when scale_loss() was not called.
  std::vector<ParamWrite> update_all(const std::vector<Tensor>& grads, const Tensor& lr, const Tensor& step) override;
  double lr() const override { return opt_.lr(); }
  int64_t step_count() const override { return opt_.step_count(); }
  void advance() override { opt_.advance(); }

 private:
  Optimizer& opt_;
  Tensor scale_;  // the traced loss-scale input
};

}  // namespace optim
}  // namespace tessera
