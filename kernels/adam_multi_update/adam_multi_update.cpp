#include "kernels/adam_multi_update/adam_multi_update.h"

#include <string>

namespace tessera {

namespace {

const char* decay_op(AdamDecay d) {
  return d == AdamDecay::coupled ? "adam_multi_update (adam)" : "adam_multi_update (adamw)";
}

// The inputs of parameter i as adam_update takes them: (p_i, g_i, m_i, v_i, lr, step[, grad_scale]).
template <class T>
std::vector<T> single(const std::vector<T>& in, size_t n, size_t i) {
  std::vector<T> s{in[i], in[n + i], in[2 * n + i], in[3 * n + i], in[4 * n], in[4 * n + 1]};
  if (in.size() == 4 * n + 3) s.push_back(in[4 * n + 2]);
  return s;
}

}  // namespace

std::vector<Tensor> adam_multi_update(const std::vector<Tensor>& p, const std::vector<Tensor>& g,
                                      const std::vector<Tensor>& m, const std::vector<Tensor>& v, const Tensor& lr,
                                      const Tensor& step, AdamDecay decay, double beta1, double beta2,
                                      double eps, const std::vector<double>& weight_decay,
                                      const Tensor& grad_scale) {
  const size_t n = p.size();
  TS_CHECK(g.size() == n && m.size() == n && v.size() == n && weight_decay.size() == n, ValueError,
           "adam_multi_update: got " << n << " params, " << g.size() << " grads, " << m.size() << " exp_avg, "
                                     << v.size() << " exp_avg_sq and " << weight_decay.size()
                                     << " weight decays; they must be as many");
  std::vector<Tensor> in;
  in.reserve(4 * n + 3);
  for (const auto* list : {&p, &g, &m, &v}) in.insert(in.end(), list->begin(), list->end());
  in.push_back(lr);
  in.push_back(step);
  if (grad_scale.defined()) in.push_back(grad_scale);
  return call<op::AdamMultiUpdate>({beta1, beta2, eps, decay, weight_decay}, in);
}

std::vector<TensorMeta> op::AdamMultiUpdate::infer(const std::vector<TensorMeta>& in, const Attrs& a) {
  const size_t n = a.weight_decay.size();
  const char* op = decay_op(a.decay);
  TS_CHECK(n >= 1, ValueError, op << ": needs at least one parameter (weight_decay is empty)");
  TS_CHECK(in.size() == 4 * n + 2 || in.size() == 4 * n + 3, ValueError,
           op << ": expected " << 4 * n + 2 << " inputs for " << n << " parameters (" << 4 * n + 3
              << " with grad_scale), got " << in.size());
  std::vector<TensorMeta> out(3 * n);
  for (size_t i = 0; i < n; ++i) {
    const std::string what = std::string(op) + ", parameter " + std::to_string(i);
    const std::vector<TensorMeta> r =
        detail::infer_adam_update(what.c_str(), single(in, n, i), {a.beta1, a.beta2, a.eps, a.weight_decay[i]});
    TS_CHECK(in[i].dtype == in[0].dtype, DTypeError,
             what << ": param " << in[i] << " does not share parameter 0's dtype " << in[0]);
    TS_CHECK(in[i].device == in[0].device, DeviceError,
             what << ": param " << in[i] << " is not on parameter 0's device " << in[0]);
    out[i] = r[0], out[n + i] = r[1], out[2 * n + i] = r[2];
  }
  return out;
}

void op::AdamMultiUpdate::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  const size_t n = a.weight_decay.size();
  for (size_t i = 0; i < n; ++i)
    detail::adam_update_cpu(decay_op(a.decay), single(in, n, i), {out[i], out[n + i], out[2 * n + i]},
                            {a.beta1, a.beta2, a.eps, a.weight_decay[i]}, a.decay);
}

}  // namespace tessera
