#include "optim/adafactor.h"

#include <cmath>
#include <utility>

#include "kernels/adafactor_factored_update/adafactor_factored_update.h"
#include "kernels/adafactor_update/adafactor_update.h"

namespace tessera {
namespace optim {

void AdafactorOptions::validate() const {
  TS_CHECK(std::isfinite(lr_) && lr_ >= 0, ValueError, "Adafactor: lr must be finite and >= 0, got " << lr_);
  detail::check_adafactor_attrs("Adafactor", a_);
}

namespace {

const AdafactorOptions& validated(const AdafactorOptions& o) {
  o.validate();
  return o;
}

}  // namespace

Adafactor::Adafactor(std::vector<Tensor> params, AdafactorOptions options)
    : Adafactor({ParamGroup{std::move(params), {}}}, options) {}

Adafactor::Adafactor(const std::vector<ParamGroup>& groups, AdafactorOptions options)
    : Optimizer(groups, validated(options).lr(), options.weight_decay()), options_(options) {
  for (const Tensor& p : params_) {
    const bool factored = options_.factored() && p.dim() >= 2;
    factored_.push_back(factored);
    exp_avg_sq_.push_back(zeros(factored ? detail::adafactor_factored_shape(p.shape()) : p.shape(),
                                TensorOptions(p.dtype()).device(p.device())));
  }
}

std::vector<std::pair<std::string, double>> Adafactor::hyperparameters() const {
  const AdafactorOptions& o = options_;
  return {{"lr", lr_},
          {"eps1", o.eps1()},
          {"eps2", o.eps2()},
          {"clip_threshold", o.clip_threshold()},
          {"decay_rate", o.decay_rate()},
          {"weight_decay", o.weight_decay()},
          {"relative_step", o.relative_step() ? 1.0 : 0.0},
          {"scale_parameter", o.scale_parameter() ? 1.0 : 0.0},
          {"factored", o.factored() ? 1.0 : 0.0}};
}

std::vector<Write> Adafactor::update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) {
  TS_CHECK(i < params_.size(), ValueError,
           "Adafactor: parameter index " << i << " out of range (" << params_.size() << ")");
  AdafactorAttrs attrs = options_.attrs();
  attrs.weight_decay = weight_decay(i);
  const std::vector<Tensor> out =
      factored_[i] ? adafactor_factored_update(params_[i], grad, exp_avg_sq_[i], lr, step, attrs)
                   : adafactor_update(params_[i], grad, exp_avg_sq_[i], lr, step, attrs);
  return {{params_[i], out[0]}, {exp_avg_sq_[i], out[1]}};
}

}  // namespace optim
}  // namespace tessera
