// Learning-rate schedules: lr_at(t) for the 1-based step number t (the update that takes
// step_count() from t - 1 to t; t = 0 is "before any step").
//
//   WarmupCosine sched(3e-4, /*warmup_steps=*/2000, /*total_steps=*/100000, /*floor=*/3e-5);
//   for (...) {
//     sched.apply(opt);   // opt.set_lr(sched.lr_at(opt.step_count() + 1))
//     step.run(batch);    // or loss.backward(); opt.step();
//   }
//
// With warmup W and total T (T >= W):
//   t <= W (W > 0):  peak · t / W                       (linear warmup: peak/W at t = 1, peak at t = W)
//   W < t < T:       floor + (peak - floor) · f((t - W) / (T - W))
//   t >= T:          floor
// with f(x) = 1 - x (WarmupLinear) or (1 + cos(πx)) / 2 (WarmupCosine). ConstantLR(lr, W) is
// lr · t / W for t <= W and lr after it (no warmup for W = 0).
#pragma once

#include <cstdint>

#include "optim/optimizer.h"

namespace tessera {
namespace optim {

class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  /// The learning rate of step t (1-based); ValueError for t < 0.
  virtual double lr_at(int64_t t) const = 0;
  /// Sets opt's learning rate for its next step: lr_at(opt.step_count() + 1).
  void apply(Optimizer& opt) const { opt.set_lr(lr_at(opt.step_count() + 1)); }
};

/// Linear warmup over warmup_steps (none by default), then the same lr at every step.
class ConstantLR : public LRSchedule {
 public:
  /// ValueError unless lr is finite and >= 0 and warmup_steps >= 0.
  explicit ConstantLR(double lr, int64_t warmup_steps = 0);
  double lr_at(int64_t t) const override;

 private:
  double lr_;
  int64_t warmup_;
};

/// Linear warmup to `peak`, then a decay to `floor` at total_steps (see the top of this file).
class WarmupDecay : public LRSchedule {
 public:
  /// ValueError unless 0 <= floor <= peak (finite), warmup_steps >= 0, total_steps >= warmup_steps.
  WarmupDecay(double peak, int64_t warmup_steps, int64_t total_steps, double floor);
  double lr_at(int64_t t) const override;

 protected:
  /// The decay shape on [0, 1]: 1 at 0, 0 at 1.
  virtual double shape(double x) const = 0;

 private:
  double peak_, floor_;
  int64_t warmup_, total_;
};

/// Linear warmup, then linear decay to the floor.
class WarmupLinear : public WarmupDecay {
 public:
  WarmupLinear(double peak, int64_t warmup_steps, int64_t total_steps, double floor = 0.0)
      : WarmupDecay(peak, warmup_steps, total_steps, floor) {}

 protected:
  double shape(double x) const override { return 1.0 - x; }
};

/// Linear warmup, then half a cosine down to the floor.
class WarmupCosine : public WarmupDecay {
 public:
  WarmupCosine(double peak, int64_t warmup_steps, int64_t total_steps, double floor = 0.0)
      : WarmupDecay(peak, warmup_steps, total_steps, floor) {}

 protected:
  double shape(double x) const override;
};

}  // namespace optim
}  // namespace tessera
