#include "kernels/common/adam_step.h"

#include <cmath>

#include "core/half.h"
#include "core/op.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/update_args.h"

namespace tessera {
namespace detail {

std::vector<TensorMeta> infer_adam_update(const char* op, const std::vector<TensorMeta>& in, const AdamHyper& a) {
  TS_CHECK(in.size() == 6 || in.size() == 7, ValueError,
           op << ": expected 6 inputs (7 with grad_scale), got " << in.size());
  check_update_args(op, in, {"param", "grad", "exp_avg", "exp_avg_sq"});
  if (in.size() == 7) {
    const TensorMeta& s = in[6];
    TS_CHECK(s.dtype == DType::f64, DTypeError, op << ": grad_scale must be a 0-d f64 tensor, got " << s);
    TS_CHECK(s.shape.ndim() == 0, ShapeError, op << ": grad_scale must be a 0-d f64 tensor, got " << s);
    TS_CHECK(s.device == in[0].device, DeviceError,
             op << ": grad_scale " << s << " is not on the device of param " << in[0]);
  }
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

// g·s as mul(g, cast(s, T)) stores it: s rounded to T (through f32 for bf16/f16, as cast rounds),
// then the product in T (in f32 for bf16/f16) rounded to T. Written to memory, so the update
// reads exactly these values.
Tensor scaled_grad(const char* op, const Tensor& g, double s) {
  Tensor out = empty(g.shape(), TensorOptions(g.dtype()).device(g.device()));
  const int64_t n = g.numel();
  auto half_loop = [&](float (*to_float)(uint16_t), uint16_t (*from_float)(float)) {
    const uint16_t* x = static_cast<const uint16_t*>(g.data_ptr());
    uint16_t* y = static_cast<uint16_t*>(out.data_ptr());
    const float sf = to_float(from_float(static_cast<float>(s)));
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) y[i] = from_float(to_float(x[i]) * sf);
  };
  switch (g.dtype()) {
    case DType::f32: {
      const float* x = g.data<float>();
      float* y = out.data<float>();
      const float sf = static_cast<float>(s);
#pragma omp parallel for if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] * sf;
      break;
    }
    case DType::f64: {
      const double* x = g.data<double>();
      double* y = out.data<double>();
#pragma omp parallel for if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
      break;
    }
    case DType::bf16: half_loop(&bf16_bits_to_float, &float_to_bf16_bits); break;
    case DType::f16: half_loop(&f16_bits_to_float, &float_to_f16_bits); break;
    default: TS_THROW(DTypeError, op << ": grad " << g.meta() << " is not floating point");
  }
  return out;
}

struct AdamCall {
  const char* op;
  AdamHyper h;
  AdamDecay decay;
};

// The f32/f64 kernel on inputs (p, g, m, v, lr, step); bf16/f16 arrive widened.
void adam_f32_f64(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const void* call) {
  const AdamCall& c = *static_cast<const AdamCall*>(call);
  const double lr = read_update_scalar(in[4]), t = read_update_scalar(in[5]);
  TS_CHECK(t >= 1, ValueError, c.op << ": step must be >= 1 (1-based), got " << t);
  dispatch_float(out[0].dtype(), c.op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (c.decay == AdamDecay::coupled) {
      adam_kernel<T, AdamDecay::coupled>(in, out, c.h, lr, t);
    } else {
      adam_kernel<T, AdamDecay::decoupled>(in, out, c.h, lr, t);
    }
  });
}

}  // namespace

void adam_update_cpu(const char* op, const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                     const AdamHyper& a, AdamDecay decay) {
  std::vector<Tensor> args(in.begin(), in.begin() + 6);
  if (in.size() == 7) args[1] = scaled_grad(op, in[1], read_update_scalar(in[6]));
  const AdamCall call{op, a, decay};
  compute_cpu_widened(args, out, &adam_f32_f64, &call);
}

}  // namespace detail
}  // namespace tessera
