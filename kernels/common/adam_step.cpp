#include "kernels/common/adam_step.h"

#include <cmath>

#include "core/op.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/update_args.h"

namespace tessera {
namespace detail {

std::vector<TensorMeta> infer_adam_update(const char* op, const std::vector<TensorMeta>& in, const AdamHyper& a) {
  check_num_inputs(op, in, 6);
  check_update_args(op, in, {"param", "grad", "exp_avg", "exp_avg_sq"});
  TS_CHECK(a.beta1 >= 0 && a.beta1 < 1, ValueError, op << ": beta1 must be in [0, 1), got " << a.beta1);
  TS_CHECK(a.beta2 >= 0 && a.beta2 < 1, ValueError, op << ": beta2 must be in [0, 1), got " << a.beta2);
  TS_CHECK(std::isfinite(a.eps) && a.eps >= 0, ValueError, op << ": eps must be finite and >= 0, got " << a.eps);
  TS_CHECK(std::isfinite(a.weight_decay) && a.weight_decay >= 0, ValueError,
           op << ": weight_decay must be finite and >= 0, got " << a.weight_decay);
  return {in[0], in[0], in[0]};
}

namespace {

//   g' = g + wd·p (coupled) or g (decoupled)
//   m' = b1·m + (1 - b1)·g'
//   v' = b2·v + (1 - b2)·g'²
//   p' = p·(1 - lr·wd, decoupled only) - (lr / (1 - b1^t)) · m' / (sqrt(v') / sqrt(1 - b2^t) + eps)
template <class T, AdamDecay kDecay>
void adam_kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const AdamHyper& a, double lr_d,
                 double t) {
  const double step_size_d = lr_d / (1.0 - std::pow(a.beta1, t));
  const double bc2_sqrt_d = std::sqrt(1.0 - std::pow(a.beta2, t));
  const T* p = static_cast<const T*>(in[0].data_ptr());
  const T* g = static_cast<const T*>(in[1].data_ptr());
  const T* m = static_cast<const T*>(in[2].data_ptr());
  const T* v = static_cast<const T*>(in[3].data_ptr());
  T* p_out = static_cast<T*>(out[0].data_ptr());
  T* m_out = static_cast<T*>(out[1].data_ptr());
  T* v_out = static_cast<T*>(out[2].data_ptr());
  const T b1 = static_cast<T>(a.beta1), b2 = static_cast<T>(a.beta2);
  const T one_minus_b1 = static_cast<T>(1.0 - a.beta1), one_minus_b2 = static_cast<T>(1.0 - a.beta2);
  const T wd = static_cast<T>(a.weight_decay), decay = static_cast<T>(1.0 - lr_d * a.weight_decay);
  const T eps = static_cast<T>(a.eps), step_size = static_cast<T>(step_size_d), bc2_sqrt = static_cast<T>(bc2_sqrt_d);
  const int64_t n = out[0].numel();
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const T pi = p[i], mi = m[i], vi = v[i];
    const T gi = kDecay == AdamDecay::coupled ? g[i] + wd * pi : g[i];
    const T m_new = b1 * mi + one_minus_b1 * gi;
    const T v_new = b2 * vi + one_minus_b2 * gi * gi;
    const T denom = std::sqrt(v_new) / bc2_sqrt + eps;
    m_out[i] = m_new;
    v_out[i] = v_new;
    if constexpr (kDecay == AdamDecay::coupled) {
      p_out[i] = pi - step_size * m_new / denom;
    } else {
      p_out[i] = pi * decay - step_size * m_new / denom;  // decoupled decay first, then the Adam step
    }
  }
}

}  // namespace

void adam_update_cpu(const char* op, const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                     const AdamHyper& a, AdamDecay decay) {
  const double lr = read_update_scalar(in[4]), t = read_update_scalar(in[5]);
  TS_CHECK(t >= 1, ValueError, op << ": step must be >= 1 (1-based), got " << t);
  dispatch_float(out[0].dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (decay == AdamDecay::coupled) {
      adam_kernel<T, AdamDecay::coupled>(in, out, a, lr, t);
    } else {
      adam_kernel<T, AdamDecay::decoupled>(in, out, a, lr, t);
    }
  });
}

}  // namespace detail
}  // namespace tessera
