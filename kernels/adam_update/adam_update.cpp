#include "kernels/adam_update/adam_update.h"

#include <cmath>

#include "kernels/common/dispatch.h"
#include "kernels/common/update_args.h"

namespace tessera {

std::vector<Tensor> adam_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                                const Tensor& lr, const Tensor& step, double beta1, double beta2, double eps,
                                double weight_decay) {
  return call<AdamUpdate>({beta1, beta2, eps, weight_decay}, {p, g, m, v, lr, step});
}

std::vector<TensorMeta> AdamUpdate::infer(const std::vector<TensorMeta>& in, const Attrs& a) {
  check_num_inputs(kName, in, 6);
  detail::check_update_args(kName, in, {"param", "grad", "exp_avg", "exp_avg_sq"});
  TS_CHECK(a.beta1 >= 0 && a.beta1 < 1, ValueError, kName << ": beta1 must be in [0, 1), got " << a.beta1);
  TS_CHECK(a.beta2 >= 0 && a.beta2 < 1, ValueError, kName << ": beta2 must be in [0, 1), got " << a.beta2);
  TS_CHECK(std::isfinite(a.eps) && a.eps >= 0, ValueError,
           kName << ": eps must be finite and >= 0, got " << a.eps);
  TS_CHECK(std::isfinite(a.weight_decay) && a.weight_decay >= 0, ValueError,
           kName << ": weight_decay must be finite and >= 0, got " << a.weight_decay);
  return {in[0], in[0], in[0]};
}

void AdamUpdate::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  const double lr_d = detail::read_update_scalar(in[4]), t = detail::read_update_scalar(in[5]);
  TS_CHECK(t >= 1, ValueError, kName << ": step must be >= 1 (1-based), got " << t);
  // Bias corrections in f64: step_size = lr / (1 - b1^t), and sqrt(1 - b2^t) divides sqrt(v').
  const double step_size_d = lr_d / (1.0 - std::pow(a.beta1, t));
  const double bc2_sqrt_d = std::sqrt(1.0 - std::pow(a.beta2, t));
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(in[0].data_ptr());
    const T* g = static_cast<const T*>(in[1].data_ptr());
    const T* m = static_cast<const T*>(in[2].data_ptr());
    const T* v = static_cast<const T*>(in[3].data_ptr());
    T* p_out = static_cast<T*>(out[0].data_ptr());
    T* m_out = static_cast<T*>(out[1].data_ptr());
    T* v_out = static_cast<T*>(out[2].data_ptr());
    const T b1 = static_cast<T>(a.beta1), b2 = static_cast<T>(a.beta2);
    const T one_minus_b1 = static_cast<T>(1.0 - a.beta1), one_minus_b2 = static_cast<T>(1.0 - a.beta2);
    const T wd = static_cast<T>(a.weight_decay), eps = static_cast<T>(a.eps);
    const T step_size = static_cast<T>(step_size_d), bc2_sqrt = static_cast<T>(bc2_sqrt_d);
    const int64_t n = out[0].numel();
    // Aliasing: p_out, m_out, v_out may equal p, m, v. Element i of the outputs depends only on
    // element i of the inputs, and every input element is loaded into a local before any
    // output element is stored, so writing in place is safe.
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T pi = p[i], mi = m[i], vi = v[i];
      const T gi = g[i] + wd * pi;  // L2 decay joins the gradient
      const T m_new = b1 * mi + one_minus_b1 * gi;
      const T v_new = b2 * vi + one_minus_b2 * gi * gi;
      const T denom = std::sqrt(v_new) / bc2_sqrt + eps;
      m_out[i] = m_new;
      v_out[i] = v_new;
      p_out[i] = pi - step_size * m_new / denom;
    }
  });
}

}  // namespace tessera
