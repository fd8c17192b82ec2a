#include "optim/adamw.h"

#include <utility>

#include "kernels/adam_update/adam_update.h"

namespace tessera {
namespace optim {

namespace {
const AdamWOptions& validated(const AdamWOptions& o) {
  o.validate();
  return o;
}
}  // namespace

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : AdamW({ParamGroup{std::move(params), {}}}, options) {}

AdamW::AdamW(const std::vector<ParamGroup>& groups, AdamWOptions options)
    : AdamMoments(groups, validated(options).lr(), options.beta1(), options.beta2(), options.eps(),
                  options.weight_decay(), AdamDecay::decoupled),
      options_(options) {}

std::vector<Write> AdamW::update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) {
  return update_scaled(i, grad, lr, step, Tensor());
}

std::vector<Write> AdamW::update_scaled(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step,
                                       const Tensor& grad_scale) {
  check_index("AdamW", i);
  return writes(i, adam_update(params_[i], grad, exp_avg_[i], exp_avg_sq_[i], lr, step, AdamDecay::decoupled, beta1_,
                               beta2_, eps_, weight_decay(i), grad_scale));
}

}  // namespace optim
}  // namespace tessera
