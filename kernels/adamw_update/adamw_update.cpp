#include "kernels/adamw_update/adamw_update.h"

#include "kernels/common/adam_step.h"

namespace tessera {

std::vector<Tensor> adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                                 const Tensor& lr, const Tensor& step, double beta1, double beta2, double eps,
                                 double weight_decay, const Tensor& grad_scale) {
  std::vector<Tensor> in{p, g, m, v, lr, step};
  if (grad_scale.defined()) in.push_back(grad_scale);
  return call<AdamwUpdate>({beta1, beta2, eps, weight_decay}, in);
}

std::vector<TensorMeta> AdamwUpdate::infer(const std::vector<TensorMeta>& in, const Attrs& a) {
  return detail::infer_adam_update(kName, in, {a.beta1, a.beta2, a.eps, a.weight_decay});
}

void AdamwUpdate::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  detail::adam_update_cpu(kName, in, out, {a.beta1, a.beta2, a.eps, a.weight_decay}, AdamDecay::decoupled);
}

}  // namespace tessera
