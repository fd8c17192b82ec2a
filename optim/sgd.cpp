#include "optim/sgd.h"

#include <cmath>
#include <utility>

#include "kernels/sgd_update/sgd_update.h"

namespace tessera {
namespace optim {

void SGDOptions::validate() const {
  TS_CHECK(std::isfinite(lr_) && lr_ >= 0, ValueError, "SGD: lr must be finite and >= 0, got " << lr_);
  TS_CHECK(std::isfinite(momentum_) && momentum_ >= 0, ValueError,
           "SGD: momentum must be finite and >= 0, got " << momentum_);
  TS_CHECK(std::isfinite(dampening_), ValueError, "SGD: dampening must be finite, got " << dampening_);
  TS_CHECK(std::isfinite(weight_decay_) && weight_decay_ >= 0, ValueError,
           "SGD: weight_decay must be finite and >= 0, got " << weight_decay_);
  TS_CHECK(!nesterov_ || (momentum_ > 0 && dampening_ == 0), ValueError,
           "SGD: nesterov needs momentum > 0 and dampening == 0, got momentum "
               << momentum_ << ", dampening " << dampening_);
}

namespace {
const SGDOptions& validated(const SGDOptions& o) {
  o.validate();
  return o;
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : SGD({ParamGroup{std::move(params), {}}}, options) {}

SGD::SGD(const std::vector<ParamGroup>& groups, SGDOptions options)
    : Optimizer(groups, validated(options).lr(), options.weight_decay()), options_(options) {
  momentum_buffers_.reserve(params_.size());
  for (const Tensor& p : params_)
    momentum_buffers_.push_back(zeros(p.shape(), TensorOptions(p.dtype()).device(p.device())));
}

std::vector<std::pair<std::string, double>> SGD::hyperparameters() const {
  return {{"lr", lr_},
          {"momentum", options_.momentum()},
          {"dampening", options_.dampening()},
          {"weight_decay", options_.weight_decay()},
          {"nesterov", options_.nesterov() ? 1.0 : 0.0}};
}

std::vector<Write> SGD::update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) {
  TS_CHECK(i < params_.size(), ValueError,
           "SGD: parameter index " << i << " out of range (" << params_.size() << ")");
  const Tensor& buf = momentum_buffers_[i];
  std::vector<Tensor> out = sgd_update(params_[i], grad, buf, lr, step, options_.momentum(),
                                       options_.dampening(), weight_decay(i), options_.nesterov());
  if (options_.momentum() == 0) return {{params_[i], out[0]}};
  return {{params_[i], out[0]}, {buf, out[1]}};
}

}  // namespace optim
}  // namespace tessera
