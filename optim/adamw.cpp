#include "optim/adamw.h"

#include <cmath>
#include <utility>

#include "kernels/adamw_update/adamw_update.h"

namespace tessera {
namespace optim {

void AdamWOptions::validate() const {
  TS_CHECK(std::isfinite(lr_) && lr_ >= 0, ValueError, "AdamW: lr must be finite and >= 0, got " << lr_);
  TS_CHECK(beta1_ >= 0 && beta1_ < 1, ValueError, "AdamW: beta1 must be in [0, 1), got " << beta1_);
  TS_CHECK(beta2_ >= 0 && beta2_ < 1, ValueError, "AdamW: beta2 must be in [0, 1), got " << beta2_);
  TS_CHECK(std::isfinite(eps_) && eps_ >= 0, ValueError, "AdamW: eps must be finite and >= 0, got " << eps_);
  TS_CHECK(std::isfinite(weight_decay_) && weight_decay_ >= 0, ValueError,
           "AdamW: weight_decay must be finite and >= 0, got " << weight_decay_);
}

namespace {
const AdamWOptions& validated(const AdamWOptions& o) {
  o.validate();
  return o;
}
}  // namespace

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : AdamW({ParamGroup{std::move(params), {}}}, options) {}

AdamW::AdamW(const std::vector<ParamGroup>& groups, AdamWOptions options)
    : Optimizer(groups, validated(options).lr(), options.weight_decay()), options_(options) {
  exp_avg_.reserve(params_.size());
  exp_avg_sq_.reserve(params_.size());
  for (const Tensor& p : params_) {
    TensorOptions o = TensorOptions(p.dtype()).device(p.device());
    exp_avg_.push_back(zeros(p.shape(), o));
    exp_avg_sq_.push_back(zeros(p.shape(), o));
  }
}

std::vector<Tensor> AdamW::state() const {
  std::vector<Tensor> s(exp_avg_);
  s.insert(s.end(), exp_avg_sq_.begin(), exp_avg_sq_.end());
  return s;
}

std::vector<std::pair<std::string, double>> AdamW::hyperparameters() const {
  return {{"lr", lr_},
          {"beta1", options_.beta1()},
          {"beta2", options_.beta2()},
          {"eps", options_.eps()},
          {"weight_decay", options_.weight_decay()}};
}

std::vector<Write> AdamW::update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) {
  TS_CHECK(i < params_.size(), ValueError,
           "AdamW: parameter index " << i << " out of range (" << params_.size() << ")");
  std::vector<Tensor> out =
      adamw_update(params_[i], grad, exp_avg_[i], exp_avg_sq_[i], lr, step, options_.beta1(),
                   options_.beta2(), options_.eps(), weight_decay(i));
  return {{params_[i], out[0]}, {exp_avg_[i], out[1]}, {exp_avg_sq_[i], out[2]}};
}

}  // namespace optim
}  // namespace tessera
