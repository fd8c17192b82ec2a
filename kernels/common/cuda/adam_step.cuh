// The fused Adam-family update on the GPU, shared by adam_update and adam_multi_update (the CPU
// kernel is kernels/common/adam_step.cpp). Elementwise over p [*]:
//   g' = g + wd·p (coupled) or g (decoupled)
//   m' = b1·m + (1 − b1)·g',   v' = b2·v + (1 − b2)·g'²
//   p' = p·(1 − lr·wd, decoupled only) − (lr / (1 − b1^t)) · m' / (sqrt(v') / sqrt(1 − b2^t) + eps)
// lr and t are read inside the kernel from their 0-d f64 device tensors (a captured CUDA graph
// replays the step with new values); the bias corrections are computed in f64 once per block,
// then the elements in acc_t. Element i of every input is loaded before element i of an
// output is stored, so p', m', v' may alias p, m, v.
// With the optional grad_scale s (0-d f64 on the device, e.g. the clip factor) the gradient is
// first g·s exactly as mul(g, cast(s, T)) stores it: s rounded to T as cast rounds, the product
// rounded to T (__fmul_rn/__dmul_rn, so it is never contracted into a later FMA).
#pragma once

#include <type_traits>
#include <vector>

#include "core/cuda/check.cuh"
#include "kernels/common/adam_step.h"
#include "kernels/common/cuda/device_math.cuh"
#include "kernels/common/cuda/dtype.cuh"

namespace tessera {
namespace cuda {

/// s converted to T as the cast op converts f64 (bf16/f16 through f32).
template <class T>
__device__ __forceinline__ T round_scale(double s) {
  if constexpr (std::is_same_v<T, double>) {
    return s;
  } else if constexpr (std::is_same_v<T, float>) {
    return __double2float_rn(s);
  } else {
    return from_acc<T>(__double2float_rn(s));
  }
}

/// g·s as mul(g, s) stores it (rounded to T), in acc_t.
template <class T>
__device__ __forceinline__ acc_t<T> scaled_grad(T g, T s) {
  if constexpr (std::is_same_v<T, double>) {
    return __dmul_rn(g, s);
  } else if constexpr (std::is_same_v<T, float>) {
    return __fmul_rn(g, s);
  } else {
    return to_acc(from_acc<T>(__fmul_rn(to_acc(g), to_acc(s))));
  }
}

// The step's scalars, from lr, t and the hyperparameters (f64 math, then rounded to acc_t).
template <class T>
struct AdamScalars {
  T s;  // the gradient scale rounded to T (1 without one)
  acc_t<T> step_size, bc2_sqrt, b1, b2, one_minus_b1, one_minus_b2, wd, decay, eps;
};

/// The scalars of one update from lr, t, the optional scale (nullptr: none) and the
/// hyperparameters: two f64 pows, costly next to one element's work, so one thread of a
/// block computes them and shares them.
template <class T>
__device__ AdamScalars<T> adam_scalars(const double* lr_t, const double* step_t, const double* scale_t,
                                       const detail::AdamHyper& h) {
  using A = acc_t<T>;
  AdamScalars<T> sc;
  const double lr = *lr_t, t = *step_t;
  sc.s = round_scale<T>(scale_t != nullptr ? *scale_t : 1.0);
  sc.step_size = static_cast<A>(lr / (1.0 - ::pow(h.beta1, t)));
  sc.bc2_sqrt = static_cast<A>(::sqrt(1.0 - ::pow(h.beta2, t)));
  sc.b1 = static_cast<A>(h.beta1), sc.b2 = static_cast<A>(h.beta2);
  sc.one_minus_b1 = static_cast<A>(1.0 - h.beta1), sc.one_minus_b2 = static_cast<A>(1.0 - h.beta2);
  sc.wd = static_cast<A>(h.weight_decay), sc.decay = static_cast<A>(1.0 - lr * h.weight_decay);
  sc.eps = static_cast<A>(h.eps);
  return sc;
}

/// The update of element i: reads p[i], g[i], m[i], v[i], then writes p_out[i], m_out[i], v_out[i].
template <class T, AdamDecay kDecay>
__device__ __forceinline__ void adam_element(const AdamScalars<T>& c, bool scaled, const T* p, const T* g,
                                             const T* m, const T* v, T* p_out, T* m_out, T* v_out, int64_t i) {
  using A = acc_t<T>;
  const A pi = to_acc(p[i]), mi = to_acc(m[i]), vi = to_acc(v[i]);
  const A g0 = scaled ? scaled_grad(g[i], c.s) : to_acc(g[i]);
  const A gi = kDecay == AdamDecay::coupled ? g0 + c.wd * pi : g0;
  const A m_new = c.b1 * mi + c.one_minus_b1 * gi;
  const A v_new = c.b2 * vi + c.one_minus_b2 * gi * gi;
  const A denom = dev_sqrt(v_new) / c.bc2_sqrt + c.eps;
  m_out[i] = from_acc<T>(m_new);
  v_out[i] = from_acc<T>(v_new);
  const A p_new = kDecay == AdamDecay::coupled ? pi - c.step_size * m_new / denom
                                                      : pi * c.decay - c.step_size * m_new / denom;
  p_out[i] = from_acc<T>(p_new);
}

// scale_t: the grad_scale tensor, or nullptr (no scaling). Every thread takes kAdamPerThread
// elements, i, i + stride, ... (coalesced, loads in flight).
constexpr int kAdamPerThread = 4;

template <class T, AdamDecay kDecay>
__global__ void adam_kernel(const T* p, const T* g, const T* m, const T* v, const double* lr_t, const double* step_t,
                            const double* scale_t, T* p_out, T* m_out, T* v_out, int64_t n, detail::AdamHyper h) {
  __shared__ AdamScalars<T> sc;
  if (threadIdx.x == 0) sc = adam_scalars<T>(lr_t, step_t, scale_t, h);
  __syncthreads();
  const AdamScalars<T> c = sc;
  const bool scaled = scale_t != nullptr;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    adam_element<T, kDecay>(c, scaled, p, g, m, v, p_out, m_out, v_out, i);
}

/// Inputs (p, g, m, v, lr, step[, grad_scale]) -> outputs (p', m', v'), all on one GPU.
inline void adam_update(const char* op, const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                        const detail::AdamHyper& h, AdamDecay decay) {
  const int64_t n = out[0].numel();
  if (n == 0) return;
  dispatch_cuda_float(out[0].dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto src = [](const Tensor& t) { return static_cast<const T*>(t.data_ptr()); };
    auto dst = [](const Tensor& t) { return static_cast<T*>(t.data_ptr()); };
    const double* lr = static_cast<const double*>(in[4].data_ptr());
    const double* step = static_cast<const double*>(in[5].data_ptr());
    const double* scale = in.size() > 6 ? static_cast<const double*>(in[6].data_ptr()) : nullptr;
    const cudaStream_t stream = current_stream(out[0]);
    const unsigned blocks = blocks_for((n + kAdamPerThread - 1) / kAdamPerThread);
    if (decay == AdamDecay::coupled) {
      adam_kernel<T, AdamDecay::coupled><<<blocks, 256, 0, stream>>>(
          src(in[0]), src(in[1]), src(in[2]), src(in[3]), lr, step, scale, dst(out[0]), dst(out[1]), dst(out[2]),
          n, h);
    } else {
      adam_kernel<T, AdamDecay::decoupled><<<blocks, 256, 0, stream>>>(
          src(in[0]), src(in[1]), src(in[2]), src(in[3]), lr, step, scale, dst(out[0]), dst(out[1]), dst(out[2]),
          n, h);
    }
  });
  TS_CUDA_LAUNCH_CHECK(op);
}

}  // namespace cuda
}  // namespace tessera
