#include "kernels/adafactor_update/adafactor_update.h"

#include <cmath>

#include "kernels/common/dispatch.h"
#include "kernels/common/update_args.h"

namespace tessera {

std::vector<Tensor> adafactor_update(const Tensor& p, const Tensor& g, const Tensor& v, const Tensor& lr,
                                     const Tensor& step, const AdafactorAttrs& attrs) {
  return call<op::AdafactorUpdate>(attrs, {p, g, v, lr, step});
}

std::vector<TensorMeta> op::AdafactorUpdate::infer(const std::vector<TensorMeta>& in, const Attrs& a) {
  check_num_inputs(kName, in, 5);
  detail::check_update_args(kName, in, {"param", "grad", "exp_avg_sq"});
  detail::check_adafactor_attrs(kName, a);
  return {in[0], in[0]};
}

void op::AdafactorUpdate::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  const double lr = detail::read_update_scalar(in[3]), t = detail::read_update_scalar(in[4]);
  TS_CHECK(t >= 1, ValueError, kName << ": step must be >= 1 (1-based), got " << t);
  const double beta_d = detail::adafactor_beta2(t, a.decay_rate);
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(in[0].data_ptr());
    const T* g = static_cast<const T*>(in[1].data_ptr());
    const T* v = static_cast<const T*>(in[2].data_ptr());
    T* p_out = static_cast<T*>(out[0].data_ptr());
    T* v_out = static_cast<T*>(out[1].data_ptr());
    const T beta = static_cast<T>(beta_d), one_minus_beta = static_cast<T>(1.0 - beta_d);
    const T eps1 = static_cast<T>(a.eps1);
    const int64_t n = out[0].numel();
    const double inv_n = n > 0 ? 1.0 / static_cast<double>(n) : 0.0;
    // RMS(p) of the old parameter, before anything is written (p_out may alias p).
    const double rms_p = a.scale_parameter ? std::sqrt(detail::chunked_sum(n, [&](int64_t i) {
                                               return static_cast<double>(p[i]) * static_cast<double>(p[i]);
                                             }) * inv_n)
                                           : 0.0;
    // Pass 1: v' (element i read before it is written, so v_out may alias v) and Σu².
    const double sum_u2 = detail::chunked_sum(n, [&](int64_t i) {
      const T gi = g[i];
      const T vi = beta * v[i] + one_minus_beta * (gi * gi + eps1);
      v_out[i] = vi;
      const double u = static_cast<double>(gi / std::sqrt(vi));
      return u * u;
    });
    // Pass 2: û = u / max(1, RMS(u)/d), p' = p - α·wd·p - α·û.
    const double clip = std::max(1.0, std::sqrt(sum_u2 * inv_n) / a.clip_threshold);
    const double alpha = detail::adafactor_alpha(a, lr, t, rms_p);
    const T step_size = static_cast<T>(alpha / clip), decay = static_cast<T>(alpha * a.weight_decay);
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T pi = p[i];
      p_out[i] = pi - decay * pi - step_size * (g[i] / std::sqrt(v_out[i]));
    }
  });
}

}  // namespace tessera
