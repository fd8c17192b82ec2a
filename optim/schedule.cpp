#include "optim/schedule.h"

#include <cmath>

namespace tessera {
namespace optim {

namespace {
void check_step(int64_t t) { TS_CHECK(t >= 0, ValueError, "lr schedule: step must be >= 0, got " << t); }
}  // namespace

ConstantLR::ConstantLR(double lr, int64_t warmup_steps) : lr_(lr), warmup_(warmup_steps) {
  TS_CHECK(std::isfinite(lr) && lr >= 0, ValueError, "ConstantLR: lr must be finite and >= 0, got " << lr);
  TS_CHECK(warmup_steps >= 0, ValueError, "ConstantLR: warmup_steps must be >= 0, got " << warmup_steps);
}

double ConstantLR::lr_at(int64_t t) const {
  check_step(t);
  if (warmup_ > 0 && t <= warmup_) return lr_ * static_cast<double>(t) / static_cast<double>(warmup_);
  return lr_;
}

WarmupDecay::WarmupDecay(double peak, int64_t warmup_steps, int64_t total_steps, double floor)
    : peak_(peak), floor_(floor), warmup_(warmup_steps), total_(total_steps) {
  TS_CHECK(std::isfinite(peak) && peak >= 0, ValueError, "lr schedule: peak lr must be finite and >= 0, got " << peak);
  TS_CHECK(std::isfinite(floor) && floor >= 0 && floor <= peak, ValueError,
           "lr schedule: floor must be in [0, peak = " << peak << "], got " << floor);
  TS_CHECK(warmup_steps >= 0 && total_steps >= warmup_steps, ValueError,
           "lr schedule: need 0 <= warmup_steps <= total_steps, got warmup_steps " << warmup_steps << ", total_steps "
                                                                                   << total_steps);
}

double WarmupDecay::lr_at(int64_t t) const {
  check_step(t);
  if (warmup_ > 0 && t <= warmup_) return peak_ * static_cast<double>(t) / static_cast<double>(warmup_);
  if (t >= total_) return floor_;
  const double x = static_cast<double>(t - warmup_) / static_cast<double>(total_ - warmup_);
  return floor_ + (peak_ - floor_) * shape(x);
}

double WarmupCosine::shape(double x) const {
  constexpr double kPi = 3.14159265358979323846;
  return 0.5 * (1.0 + std::cos(kPi * x));
}

}  // namespace optim
}  // namespace tessera
