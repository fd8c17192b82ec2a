#include "optim/adam_family.h"

#include <algorithm>

#include "kernels/adam_multi_update/adam_multi_update.h"

namespace tessera {
namespace optim {
namespace detail {

AdamMoments::AdamMoments(const std::vector<ParamGroup>& groups, double lr, double beta1, double beta2, double eps,
                         double weight_decay, AdamDecay decay)
    : Optimizer(groups, lr, weight_decay), beta1_(beta1), beta2_(beta2), eps_(eps),
      default_weight_decay_(weight_decay), decay_(decay) {
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

std::vector<Write> AdamMoments::update_all(const std::vector<Tensor>& grads, const Tensor& lr, const Tensor& step) {
  const Tensor factor = step_clip_factor(grads);
  // Buckets of parameters with a gradient, walking params() backwards (the order in which
  // backward finishes their gradients): one per (dtype, device), closed when the next parameter
  // would take it past kAdamBucketElements.
  struct Bucket {
    std::vector<size_t> index;
    int64_t elements = 0;
  };
  std::vector<Bucket> open, done;
  for (size_t r = params_.size(); r-- > 0;) {
    if (!grads[r].defined()) continue;
    const Tensor& p = params_[r];
    auto it = std::find_if(open.begin(), open.end(), [&](const Bucket& b) {
      const Tensor& q = params_[b.index[0]];
      return q.dtype() == p.dtype() && q.device() == p.device();
    });
    if (it != open.end() && it->elements + p.numel() > kAdamBucketElements) {
      done.push_back(std::move(*it));
      open.erase(it);
      it = open.end();
    }
    if (it == open.end()) {
      open.push_back({});
      it = open.end() - 1;
    }
    it->index.push_back(r);
    it->elements += p.numel();
  }
  done.insert(done.end(), open.begin(), open.end());
  std::vector<Write> out;
  for (const Bucket& bucket : done) {
    std::vector<Tensor> p, g, m, v;
    std::vector<double> wd;
    for (size_t i : bucket.index) {
      p.push_back(params_[i]), g.push_back(grads[i]), m.push_back(exp_avg_[i]), v.push_back(exp_avg_sq_[i]);
      wd.push_back(weight_decay(i));
    }
    const std::vector<Tensor> r = adam_multi_update(p, g, m, v, lr, step, decay_, beta1_, beta2_, eps_, wd, factor);
    const size_t n = bucket.index.size();
    for (size_t k = 0; k < n; ++k) {
      const size_t i = bucket.index[k];
      out.push_back({params_[i], r[k]});
      out.push_back({exp_avg_[i], r[n + k]});
      out.push_back({exp_avg_sq_[i], r[2 * n + k]});
    }
  }
  return out;
}

std::vector<Write> AdamMoments::writes(size_t i, const std::vector<Tensor>& out) const {
  return {{params_[i], out[0]}, {exp_avg_[i], out[1]}, {exp_avg_sq_[i], out[2]}};
}

}  // namespace detail
}  // namespace optim
}  // namespace tessera
