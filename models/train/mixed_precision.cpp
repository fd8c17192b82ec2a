#include "models/train/mixed_precision.h"

#include "core/error.h"
#include "kernels/ops.h"

namespace tessera {
namespace train {

MixedPrecision::MixedPrecision(DType dtype) : dtype_(dtype) {
  TS_CHECK(dtype_ == DType::f32 || dtype_ == DType::bf16 || dtype_ == DType::f16, ValueError,
           "mixed precision must be f32, bf16 or f16, got " << dtype_name(dtype));
  if (dtype_ == DType::f16) scaler_.emplace();
}

std::unique_ptr<autocast::Guard> MixedPrecision::guard() const { return std::make_unique<autocast::Guard>(dtype_); }

Tensor MixedPrecision::eager_loss(const Tensor& loss) const { return scaler_ ? scaler_->scale_loss(loss) : loss; }

bool MixedPrecision::eager_step(optim::Optimizer& opt) {
  bool stepped = true;
  if (scaler_) {
    stepped = scaler_->step(opt);  // a skipped step still counts (optim/loss_scaler.h)
  } else {
    opt.step();
  }
  opt.zero_grad();
  return stepped;
}

bool MixedPrecision::eager_update(const Tensor& loss, optim::Optimizer& opt) {
  eager_loss(loss).backward();
  return eager_step(opt);
}

ParamUpdater* MixedPrecision::updater(optim::Optimizer& opt) {
  if (!scaler_) return &opt;
  scaled_ = std::make_unique<optim::ScaledUpdater>(opt);
  return scaled_.get();
}

Tensor MixedPrecision::traced_loss(const Tensor& loss, const std::map<std::string, Tensor>& inputs, bool own_scale) {
  if (!scaler_) return loss;
  const Tensor& scale = inputs.at(optim::ScaledUpdater::kScaleInput);
  if (own_scale) return mul(loss, cast(reshape(scale, {}), loss.dtype()));  // as ScaledUpdater does
  TS_CHECK(scaled_, ValueError, "MixedPrecision: updater() must make the compiled step's updater first");
  return scaled_->scale_loss(loss, scale);
}

void MixedPrecision::add_feeds(std::map<std::string, Tensor>& feeds) const {
  if (scaler_) feeds.insert(optim::ScaledUpdater::feed(*scaler_));
}

double MixedPrecision::after_run(const CompiledStep& step, double loss) {
  if (!scaler_) return loss;
  const double unscaled = loss / scaler_->scale();  // a power of two: exact
  scaler_->update(step.fetch("grads_finite").item<float>() == 0);
  return unscaled;
}

void MixedPrecision::save(io::CheckpointData& ck) const {
  ck.trainer.loss_scale = scaler_ ? scaler_->scale() : 1.0;
  if (scaler_) ck.trainer.ints["loss_scaler.clean_steps"] = scaler_->clean_steps();
}

void MixedPrecision::restore(const io::CheckpointData& ck) {
  // A run that was not f16 saved no scaler state: an f16 resume of it starts from the default.
  auto it = ck.trainer.ints.find("loss_scaler.clean_steps");
  if (scaler_ && it != ck.trainer.ints.end()) scaler_->set_state(ck.trainer.loss_scale, it->second);
}

}  // namespace train
}  // namespace tessera
