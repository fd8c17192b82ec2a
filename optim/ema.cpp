#include "optim/ema.h"

#include "core/autograd.h"
#include "kernels/ops.h"

namespace tessera {
namespace optim {

namespace {

void check_decay(double decay) {
  TS_CHECK(decay >= 0 && decay <= 1, ValueError, "EMA: decay must be in [0, 1], got " << decay);
}

}  // namespace

EMA::EMA(std::vector<Tensor> params, double decay) : params_(std::move(params)), decay_(decay) {
  check_decay(decay);
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    TS_CHECK(params_[i].defined() && is_floating(params_[i].dtype()), ValueError,
             "EMA: parameter " << i << " must be a floating tensor");
    shadows_.push_back(copy(params_[i].detach()));
  }
}

void EMA::update() { update(decay_); }

void EMA::update(double decay) {
  check_decay(decay);
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i)
    call_out<op::Add>({}, {mul(shadows_[i], decay), mul(params_[i].detach(), 1.0 - decay)}, {shadows_[i]});
  ++updates_;
}

void EMA::swap() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor saved = copy(params_[i].detach());
    copy_into(shadows_[i], params_[i]);
    copy_into(saved, shadows_[i]);
  }
}

void EMA::apply_to() const { apply_to(params_); }

void EMA::apply_to(const std::vector<Tensor>& targets) const {
  TS_CHECK(targets.size() == shadows_.size(), ValueError,
           "EMA: apply_to got " << targets.size() << " tensors for " << shadows_.size() << " averages");
  NoGradGuard no_grad;
  for (size_t i = 0; i < targets.size(); ++i) {
    TS_CHECK(targets[i].defined() && targets[i].meta() == shadows_[i].meta(), ShapeError,
             "EMA: apply_to target " << i << " is " << (targets[i].defined() ? targets[i].meta().str() : "undefined")
                                     << ", the average is " << shadows_[i].meta());
    copy_into(shadows_[i], targets[i]);
  }
}

}  // namespace optim
}  // namespace tessera
