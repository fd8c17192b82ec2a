#include "kernels/sgd_update/sgd_update.h"

#include <cmath>

#include "kernels/common/dispatch.h"
#include "kernels/common/update_args.h"

namespace tessera {

std::vector<Tensor> sgd_update(const Tensor& p, const Tensor& g, const Tensor& buf, const Tensor& lr,
                               const Tensor& step, double momentum, double dampening, double weight_decay,
                               bool nesterov) {
  return call<op::SgdUpdate>({momentum, dampening, weight_decay, nesterov}, {p, g, buf, lr, step});
}

std::vector<TensorMeta> op::SgdUpdate::infer(const std::vector<TensorMeta>& in, const Attrs& a) {
  check_num_inputs(kName, in, 5);
  detail::check_update_args(kName, in, {"param", "grad", "momentum_buffer"});
  TS_CHECK(std::isfinite(a.momentum) && a.momentum >= 0, ValueError,
           kName << ": momentum must be finite and >= 0, got " << a.momentum);
  TS_CHECK(std::isfinite(a.dampening), ValueError,
           kName << ": dampening must be finite, got " << a.dampening);
  TS_CHECK(std::isfinite(a.weight_decay) && a.weight_decay >= 0, ValueError,
           kName << ": weight_decay must be finite and >= 0, got " << a.weight_decay);
  TS_CHECK(!a.nesterov || (a.momentum > 0 && a.dampening == 0), ValueError,
           kName << ": nesterov needs momentum > 0 and dampening == 0, got momentum " << a.momentum
                 << ", dampening " << a.dampening);
  return {in[0], in[0]};
}

void op::SgdUpdate::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  const double lr_d = detail::read_update_scalar(in[3]), t = detail::read_update_scalar(in[4]);
  TS_CHECK(t >= 1, ValueError, kName << ": step must be >= 1 (1-based), got " << t);
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(in[0].data_ptr());
    const T* g = static_cast<const T*>(in[1].data_ptr());
    const T* buf = static_cast<const T*>(in[2].data_ptr());
    T* p_out = static_cast<T*>(out[0].data_ptr());
    T* buf_out = static_cast<T*>(out[1].data_ptr());
    const T lr = static_cast<T>(lr_d), mu = static_cast<T>(a.momentum), wd = static_cast<T>(a.weight_decay);
    const T one_minus_damp = static_cast<T>(1.0 - a.dampening);
    const bool use_momentum = a.momentum != 0, first = t == 1, nesterov = a.nesterov;
    const int64_t n = out[0].numel();
    // Aliasing: p_out may equal p and buf_out may equal buf. Element i of the outputs depends
    // only on element i of the inputs, and every input element is loaded into a local before
    // either output element is stored, so writing in place is safe.
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T pi = p[i], bi = buf[i];
      const T gi = g[i] + wd * pi;  // g' = g + wd·p
      T d = gi, b = bi;
      if (use_momentum) {
        b = first ? gi : mu * bi + one_minus_damp * gi;
        d = nesterov ? gi + mu * b : b;
      }
      buf_out[i] = b;
      p_out[i] = pi - lr * d;
    }
  });
}

}  // namespace tessera
