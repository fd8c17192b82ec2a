#include "kernels/adam_update/adam_update.h"

namespace tessera {

namespace {
// The op and its mode, for messages.
const char* label(AdamDecay d) { return d == AdamDecay::coupled ? "adam_update (adam)" : "adam_update (adamw)"; }
}  // namespace

std::vector<Tensor> adam_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                                const Tensor& lr, const Tensor& step, AdamDecay decay, double beta1, double beta2,
                                double eps, double weight_decay, const Tensor& grad_scale) {
  std::vector<Tensor> in{p, g, m, v, lr, step};
  if (grad_scale.defined()) in.push_back(grad_scale);
  return call<op::AdamUpdate>({beta1, beta2, eps, decay, weight_decay}, in);
}

std::vector<TensorMeta> op::AdamUpdate::infer(const std::vector<TensorMeta>& in, const Attrs& a) {
  return detail::infer_adam_update(label(a.decay), in, {a.beta1, a.beta2, a.eps, a.weight_decay});
}

void op::AdamUpdate::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  detail::adam_update_cpu(label(a.decay), in, out, {a.beta1, a.beta2, a.eps, a.weight_decay}, a.decay);
}

}  // namespace tessera
