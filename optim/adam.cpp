#include "optim/adam.h"

#include <cmath>
#include <utility>

#include "kernels/adam_update/adam_update.h"

namespace tessera {
namespace optim {

void AdamOptions::validate() const {
  TS_CHECK(std::isfinite(lr_) && lr_ >= 0, ValueError, "Adam: lr must be finite and >= 0, got " << lr_);
  TS_CHECK(beta1_ >= 0 && beta1_ < 1, ValueError, "Adam: beta1 must be in [0, 1), got " << beta1_);
  TS_CHECK(beta2_ >= 0 && beta2_ < 1, ValueError, "Adam: beta2 must be in [0, 1), got " << beta2_);
  TS_CHECK(std::isfinite(eps_) && eps_ >= 0, ValueError, "Adam: eps must be finite and >= 0, got " << eps_);
  TS_CHECK(std::isfinite(weight_decay_) && weight_decay_ >= 0, ValueError,
           "Adam: weight_decay must be finite and >= 0, got " << weight_decay_);
}

namespace {
const AdamOptions& validated(const AdamOptions& o) {
  o.validate();
  return o;
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Adam({ParamGroup{std::move(params), {}}}, options) {}

Adam::Adam(const std::vector<ParamGroup>& groups, AdamOptions options)
    : Optimizer(groups, validated(options).lr(), options.weight_decay()), options_(options) {
  exp_avg_.reserve(params_.size());
  exp_avg_sq_.reserve(params_.size());
  for (const Tensor& p : params_) {
    TensorOptions o = TensorOptions(p.dtype()).device(p.device());
    exp_avg_.push_back(zeros(p.shape(), o));
    exp_avg_sq_.push_back(zeros(p.shape(), o));
  }
}

std::vector<Tensor> Adam::state() const {
  std::vector<Tensor> s(exp_avg_);
  s.insert(s.end(), exp_avg_sq_.begin(), exp_avg_sq_.end());
  return s;
}

std::vector<std::pair<std::string, double>> Adam::hyperparameters() const {
  return {{"lr", lr_},
          {"beta1", options_.beta1()},
          {"beta2", options_.beta2()},
          {"eps", options_.eps()},
          {"weight_decay", options_.weight_decay()}};
}

std::vector<Write> Adam::update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) {
  TS_CHECK(i < params_.size(), ValueError,
           "Adam: parameter index " << i << " out of range (" << params_.size() << ")");
  std::vector<Tensor> out = adam_update(params_[i], grad, exp_avg_[i], exp_avg_sq_[i], lr, step, options_.beta1(),
                                        options_.beta2(), options_.eps(), weight_decay(i));
  return {{params_[i], out[0]}, {exp_avg_[i], out[1]}, {exp_avg_sq_[i], out[2]}};
}

}  // namespace optim
}  // namespace tessera
