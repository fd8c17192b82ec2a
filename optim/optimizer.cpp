#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "core/autograd.h"
#include "kernels/copy/copy.h"
#include "optim/clip_grad.h"

namespace tessera {
namespace optim {

namespace {

std::vector<Tensor> flatten(const std::vector<ParamGroup>& groups) {
  std::vector<Tensor> params;
  for (const ParamGroup& g : groups) params.insert(params.end(), g.params.begin(), g.params.end());
  return params;
}

}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, double lr)
    : params_(std::move(params)), weight_decay_(params_.size(), 0.0), lr_(lr) {
  for (size_t i = 0; i < params_.size(); ++i) {
    TS_CHECK(params_[i].defined(), ValueError, "optimizer: parameter " << i << " is undefined");
    TS_CHECK(params_[i].dtype() == DType::f32 || params_[i].dtype() == DType::f64, DTypeError,
             "optimizer: parameter " << i << " is " << params_[i].meta() << "; master weights must be f32 or f64");
    TS_CHECK(params_[i].is_leaf(), ValueError, "optimizer: parameter " << i << " is not a leaf tensor");
  }
}

Optimizer::Optimizer(const std::vector<ParamGroup>& groups, double lr, double weight_decay)
    : Optimizer(flatten(groups), lr) {
  weight_decay_.clear();
  for (size_t k = 0; k < groups.size(); ++k) {
    const double wd = groups[k].weight_decay.value_or(weight_decay);
    TS_CHECK(std::isfinite(wd) && wd >= 0, ValueError,
             "optimizer: weight_decay of parameter group " << k << " must be finite and >= 0, got " << wd);
    weight_decay_.insert(weight_decay_.end(), groups[k].params.size(), wd);
  }
  std::set<const TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i)
    TS_CHECK(seen.insert(params_[i].impl()).second, ValueError,
             "optimizer: parameter " << i << " " << params_[i].meta() << " is listed twice");
}

void Optimizer::set_clip_norm(double max_norm) {
  TS_CHECK(max_norm >= 0 && !std::isnan(max_norm), ValueError,
           "optimizer: clip norm must be >= 0 (0: off), got " << max_norm);
  clip_norm_ = max_norm;
}

Tensor Optimizer::step_clip_factor(const std::vector<Tensor>& grads) {
  TS_CHECK(grads.size() == params_.size(), ValueError,
           "optimizer: got " << grads.size() << " gradients for " << params_.size() << " parameters");
  // The clip factor comes from every gradient of the step, before any update.
  const bool any = std::any_of(grads.begin(), grads.end(), [](const Tensor& g) { return g.defined(); });
  if (clip_norm_ <= 0 || !any) return Tensor();
  const Tensor norm = global_grad_norm(grads);
  report_grad_norm(norm, &last_grad_norm_);
  return clip_factor(norm, clip_norm_);
}

double Optimizer::last_grad_norm() const {
  return last_grad_norm_.defined() ? last_grad_norm_.item<double>() : std::numeric_limits<double>::quiet_NaN();
}

template <class Fn>
void Optimizer::for_each_update(const std::vector<Tensor>& grads, const Tensor& lr, const Tensor& step, Fn&& fn) {
  const Tensor factor = step_clip_factor(grads);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!grads[i].defined()) continue;
    fn(i, update_scaled(i, grads[i], lr, step, factor));
  }
}

std::vector<Write> Optimizer::update_scaled(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step,
                                            const Tensor& grad_scale) {
  return update(i, grad_scale.defined() ? scale_grad(grad, grad_scale) : grad, lr, step);
}

std::vector<Write> Optimizer::update_all(const std::vector<Tensor>& grads, const Tensor& lr, const Tensor& step) {
  std::vector<Write> writes;
  for_each_update(grads, lr, step, [&](size_t, std::vector<Write> w) {
    writes.insert(writes.end(), w.begin(), w.end());
  });
  return writes;
}

void Optimizer::step() {
  NoGradGuard no_grad;
  ++step_;
  // lr and step live where the parameters do (kernels read them there, CUDA ones on the device).
  const TensorOptions where = TensorOptions(DType::f64).device(params_.empty() ? Device::cpu() : params_[0].device());
  Tensor lr = full({}, lr_, where), t = full({}, static_cast<double>(step_), where);
  std::vector<Tensor> grads;
  grads.reserve(params_.size());
  for (const Tensor& p : params_) grads.push_back(p.grad());
  // Each parameter's results are copied in before the next update runs (one at a time in memory).
  for_each_update(grads, lr, t, [&](size_t i, const std::vector<Write>& writes) {
    for (const Write& w : writes) {
      TS_CHECK(w.target.meta() == w.value.meta(), ShapeError,
               "optimizer: update of parameter " << i << " wrote " << w.value.meta() << " into " << w.target.meta());
      copy_into(w.value, w.target);  // on the tensors' device
    }
  });
}

void Optimizer::set_step_count(int64_t step) {
  TS_CHECK(step >= 0, ValueError, "optimizer: step count must be >= 0, got " << step);
  step_ = step;
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

}  // namespace optim
}  // namespace tessera
