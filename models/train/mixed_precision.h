// Mixed precision of a training run: f32 (off), bf16 or f16 autocast over f32 master weights, and
// for f16 a loss scale (optim::LossScaler) that moves with overflows.
//
//   train::MixedPrecision amp(DType::bf16);
//   { const auto g = amp.guard();  loss = model.loss(x, y); }     // eager step
//   amp.eager_update(loss, opt);                                   // backward, step, zero_grad
//
//   CompiledStep step = compile([&](auto& in) {                    // compiled step
//       const auto g = amp.guard();
//       return amp.traced_loss(model.loss(in.at("x"), in.at("y")), in); },
//     params, amp.updater(opt), feeds_with(amp));                   // amp.add_feeds(feeds)
//   double loss = amp.after_run(step, step.run(feeds));            // unscaled; moves the scale
//
// bf16 / f16: the model's matmuls, block-sparse products and attention run under autocast
// (core/autocast.h) with the f32 parameters as master weights; f16 also scales the loss: eagerly in
// eager_update(), in compiled steps through an optim::ScaledUpdater (an overflowing step leaves
// parameters and state unchanged and still counts, as optim::LossScaler::step does).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/autocast.h"
#include "core/graph/compile.h"
#include "core/io/checkpoint.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "optim/scaled_updater.h"

namespace tessera {
namespace train {

class MixedPrecision {
 public:
  /// `dtype`: f32, bf16 or f16 (ValueError otherwise).
  explicit MixedPrecision(DType dtype);
  /// The autocast dtype: f32 (off), bf16 or f16.
  DType autocast_dtype() const { return dtype_; }
  /// Whether the loss is scaled (f16).
  bool scales_loss() const { return scaler_.has_value(); }
  /// A guard to hold while computing a loss (switches autocast on for bf16/f16).
  std::unique_ptr<autocast::Guard> guard() const;
  /// The loss to differentiate eagerly: `loss` (f16: times the scale).
  Tensor eager_loss(const Tensor& loss) const;
  /// The update after the gradients of eager_loss() have been accumulated: opt.step() (f16: the
  /// scaler's step, which skips an overflowing update and still counts it), then opt.zero_grad().
  /// Returns whether the optimizer updated.
  bool eager_step(optim::Optimizer& opt);
  /// backward() of eager_loss(loss), then eager_step(opt).
  bool eager_update(const Tensor& loss, optim::Optimizer& opt);
  /// The updater a compiled step traces: `opt` itself, or for f16 a ScaledUpdater around it.
  ParamUpdater* updater(optim::Optimizer& opt);
  /// Inside a compiled step's loss function: the loss to differentiate (f16: times the fed scale).
  /// With `own_scale` (f16 steps traced without an updater, whose gradients eager_step() applies)
  /// the scale is the fed input too, but no ScaledUpdater is needed.
  Tensor traced_loss(const Tensor& loss, const std::map<std::string, Tensor>& inputs, bool own_scale = false);
  /// Adds what a compiled step needs fed besides the batch (f16: the loss scale).
  void add_feeds(std::map<std::string, Tensor>& feeds) const;
  /// After a compiled run with an updater that returned `loss`: the unscaled loss. f16: moves the
  /// scale (backoff when the step was skipped for an overflow, growth after enough clean steps).
  double after_run(const CompiledStep& step, double loss);
  /// The unscaled value of a loss that eager_loss() or traced_loss() scaled.
  double unscaled(double loss) const { return scaler_ ? loss / scaler_->scale() : loss; }
  /// The loss scale (1 unless f16) into / out of a checkpoint's trainer state.
  void save(io::CheckpointData& ck) const;
  void restore(const io::CheckpointData& ck);

 private:
  DType dtype_;
  std::optional<optim::LossScaler> scaler_;       // f16 only
  std::unique_ptr<optim::ScaledUpdater> scaled_;  // f16 compiled steps with an updater
};

}  // namespace train
}  // namespace tessera
