#include "optim/adam_family.h"

namespace tessera {
namespace optim {
namespace detail {

AdamMoments::AdamMoments(const std::vector<ParamGroup>& groups, double lr, double beta1, double beta2, double eps,
                         double weight_decay)
    : Optimizer(groups, lr, weight_decay), beta1_(beta1), beta2_(beta2), eps_(eps),
      default_weight_decay_(weight_decay) {
  exp_avg_.reserve(params_.size());
  exp_avg_sq_.reserve(params_.size());
  for (const Tensor& p : params_) {
    TensorOptions o = TensorOptions(p.dtype()).device(p.device());
    exp_avg_.push_back(zeros(p.shape(), o));
    exp_avg_sq_.push_back(zeros(p.shape(), o));
  }
}

std::vector<Tensor> AdamMoments::state() const {
  std::vector<Tensor> s(exp_avg_);
  s.insert(s.end(), exp_avg_sq_.begin(), exp_avg_sq_.end());
  return s;
}

std::vector<std::pair<std::string, double>> AdamMoments::hyperparameters() const {
  return {{"lr", lr_}, {"beta1", beta1_}, {"beta2", beta2_}, {"eps", eps_}, {"weight_decay", default_weight_decay_}};
}

void AdamMoments::check_index(const char* name, size_t i) const {
  TS_CHECK(i < params_.size(), ValueError,
           name << ": parameter index " << i << " out of range (" << params_.size() << ")");
}

std::vector<Write> AdamMoments::writes(size_t i, const std::vector<Tensor>& out) const {
  return {{params_[i], out[0]}, {exp_avg_[i], out[1]}, {exp_avg_sq_[i], out[2]}};
}

}  // namespace detail
}  // namespace optim
}  // namespace tessera
