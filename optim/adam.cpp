#include "optim/adam.h"

#include <utility>

#include "kernels/adam_update/adam_update.h"

namespace tessera {
namespace optim {

namespace {
const AdamOptions& validated(const AdamOptions& o) {
  o.validate();
  return o;
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam({ParamGroup{std::move(params), {}}}, options) {}

Adam::Adam(const std::vector<ParamGroup>& groups, AdamOptions options)
    : AdamMoments(groups, validated(options).lr(), options.beta1(), options.beta2(), options.eps(),
                  options.weight_decay(), AdamDecay::coupled),
      options_(options) {}

std::vector<Write> Adam::update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) {
  return update_scaled(i, grad, lr, step, Tensor());
}

std::vector<Write> Adam::update_scaled(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step,
                                      const Tensor& grad_scale) {
  check_index("Adam", i);
  return writes(i, adam_update(params_[i], grad, exp_avg_[i], exp_avg_sq_[i], lr, step, AdamDecay::coupled, beta1_,
                               beta2_, eps_, weight_decay(i), grad_scale));
}

}  // namespace optim
}  // namespace tessera
