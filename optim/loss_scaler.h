// Dynamic loss scaling for f16 training: the loss is multiplied by a large scale before
// backward so that small gradients survive f16; the gradients are divided by it before the
// update. When a gradient overflows (inf or NaN) the step is skipped and the scale halved;
// after `growth_interval` clean steps in a row it doubles.
//
// The skipped-step rule, the same eagerly and in compiled steps: a skipped step still counts
// as a step. Its update changes no parameter and no state, but the optimizer's step counter
// advances (LossScaler::step calls opt.advance(); a compiled step advances after every run,
// and optim::ScaledUpdater only masks the writes), so the step number t of the bias
// corrections and schedules stays the training loop's step.
//
//   LossScaler scaler;                         // scale 2^16
//   for (...) {
//     Tensor loss = ...;
//     scaler.scale_loss(loss).backward();
//     scaler.step(opt);                        // unscale, then opt.step() or skip (still counted)
//     opt.zero_grad();
//   }
//
// Made of ops (mul in the gradients' own buffers, a sum for the overflow check), so the same
// code serves CUDA gradients; only the overflow flag is read back.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "optim/optimizer.h"

namespace tessera {
namespace optim {

/// Loss scaler settings with chainable setters; checked when the scaler is made.
class LossScalerOptions {
 public:
  LossScalerOptions& init_scale(double v) { init_scale_ = v; return *this; }
  LossScalerOptions& growth_factor(double v) { growth_factor_ = v; return *this; }
  LossScalerOptions& backoff_factor(double v) { backoff_factor_ = v; return *this; }
  LossScalerOptions& growth_interval(int64_t v) { growth_interval_ = v; return *this; }

  double init_scale() const { return init_scale_; }
  double growth_factor() const { return growth_factor_; }
  double backoff_factor() const { return backoff_factor_; }
  int64_t growth_interval() const { return growth_interval_; }

  /// ValueError unless init_scale > 0 (finite), growth_factor > 1, 0 < backoff_factor < 1 and
  /// growth_interval >= 1.
  void validate() const;

 private:
  double init_scale_ = 65536.0;  // 2^16
  double growth_factor_ = 2.0;
  double backoff_factor_ = 0.5;
  int64_t growth_interval_ = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = LossScalerOptions());

  /// The current scale.
  double scale() const { return scale_; }
  /// Clean steps since the scale last changed.
  int64_t clean_steps() const { return clean_steps_; }
  const LossScalerOptions& options() const { return options_; }

  /// loss · scale() (differentiable: call backward() on the result).
  Tensor scale_loss(const Tensor& loss) const;
  /// Multiplies every defined gradient of `params` by 1/scale() in place and returns whether
  /// any element of them is inf or NaN.
  bool unscale(const std::vector<Tensor>& params) const;
  /// The transition after a step: found_inf -> scale·backoff_factor and the clean count reset;
  /// otherwise the count grows by one, and on reaching growth_interval the scale is multiplied
  /// by growth_factor and the count reset.
  void update(bool found_inf);
  /// unscale(opt.params()); then opt.step() unless a gradient is inf or NaN, in which case
  /// opt.advance() (the skipped step counts, see the file comment); then update(). Returns
  /// whether the optimizer updated. Gradients are left (unscaled) for zero_grad().
  bool step(Optimizer& opt);

  /// Restores a saved state (checkpoints). ValueError unless scale > 0 and clean_steps >= 0.
  void set_state(double scale, int64_t clean_steps);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t clean_steps_ = 0;
};

}  // namespace optim
}  // namespace tessera
