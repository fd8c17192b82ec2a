#include "optim/loss_scaler.h"

#include <cmath>

#include "core/autograd.h"
#include "kernels/ops.h"

namespace tessera {
namespace optim {

void LossScalerOptions::validate() const {
  TS_CHECK(std::isfinite(init_scale_) && init_scale_ > 0, ValueError,
           "LossScaler: init_scale must be finite and > 0, got " << init_scale_);
  TS_CHECK(std::isfinite(growth_factor_) && growth_factor_ > 1, ValueError,
           "LossScaler: growth_factor must be finite and > 1, got " << growth_factor_);
  TS_CHECK(backoff_factor_ > 0 && backoff_factor_ < 1, ValueError,
           "LossScaler: backoff_factor must be in (0, 1), got " << backoff_factor_);
  TS_CHECK(growth_interval_ >= 1, ValueError, "LossScaler: growth_interval must be >= 1, got " << growth_interval_);
}

namespace {
const LossScalerOptions& validated(const LossScalerOptions& o) {
  o.validate();
  return o;
}
}  // namespace

LossScaler::LossScaler(LossScalerOptions options)
    : options_(validated(options)), scale_(options.init_scale()) {}

Tensor LossScaler::scale_loss(const Tensor& loss) const { return mul(loss, scale_); }

bool LossScaler::unscale(const std::vector<Tensor>& params) const {
  NoGradGuard no_grad;
  Tensor bad;  // Σ sum(g·0): 0 when every element is finite, NaN when one is inf or NaN
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    call_out<op::MulScalar>({1.0 / scale_}, {g}, {g});
    Tensor s = sum(mul(g, 0.0));
    if (s.dtype() != DType::f64) s = cast(s, DType::f64);
    bad = bad.defined() ? add(bad, s) : s;
  }
  return bad.defined() && !std::isfinite(bad.item<double>());
}

void LossScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ *= options_.backoff_factor();
    clean_steps_ = 0;
    return;
  }
  if (++clean_steps_ >= options_.growth_interval()) {
    scale_ *= options_.growth_factor();
    clean_steps_ = 0;
  }
}

bool LossScaler::step(Optimizer& opt) {
  const bool found_inf = unscale(opt.params());
  if (found_inf) {
    opt.advance();  // the skipped step counts (the rule of the header), as in a compiled step
  } else {
    opt.step();
  }
  update(found_inf);
  return !found_inf;
}

void LossScaler::set_state(double scale, int64_t clean_steps) {
  TS_CHECK(std::isfinite(scale) && scale > 0, ValueError, "LossScaler: scale must be finite and > 0, got " << scale);
  TS_CHECK(clean_steps >= 0, ValueError, "LossScaler: clean_steps must be >= 0, got " << clean_steps);
  scale_ = scale;
  clean_steps_ = clean_steps;
}

}  // namespace optim
}  // namespace tessera
