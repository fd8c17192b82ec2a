#include "kernels/gelu_backward/gelu_backward.h"

#include <cmath>

#include "kernels/common/dispatch.h"

namespace tessera {

Tensor gelu_backward(const Tensor& g, const Tensor& x, GeluApprox approx) {
  return call<GeluBackward>({approx}, {g, x})[0];
}

std::vector<TensorMeta> GeluBackward::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 2);
  check_floating(kName, in[0], "gradient");
  check_same_dtype(kName, in[0], in[1]);
  TS_CHECK(in[0].shape == in[1].shape, ShapeError,
           "gelu_backward: gradient " << in[0] << " and input " << in[1] << " differ in shape");
  TS_CHECK(attrs.approximate == GeluApprox::none || attrs.approximate == GeluApprox::tanh, ValueError,
           "gelu_backward: unknown approximate value " << static_cast<int>(attrs.approximate) << " for " << in[1]);
  return {in[0]};
}

namespace {

// dx[i] = g[i]·d(x[i]) over n contiguous elements.
template <class T, class D>
void scale_by_derivative(const T* g, const T* x, T* dx, int64_t n, D d) {
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) dx[i] = g[i] * d(x[i]);
}

}  // namespace

void GeluBackward::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = in[0].data<T>();
    const T* x = in[1].data<T>();
    T* dx = out[0].data<T>();
    const int64_t n = out[0].numel();
    if (attrs.approximate == GeluApprox::tanh) {
      const T k = static_cast<T>(0.7978845608028654), c = static_cast<T>(0.044715);  // k = √(2/π)
      scale_by_derivative(g, x, dx, n, [=](T v) {
        const T t = std::tanh(k * (v + c * v * v * v));
        // Product rule on 0.5·x·(1 + t): the (1 + t) term, then x times dt/dx.
        return T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * k * (T(1) + T(3) * c * v * v);
      });
    } else {
      const T r = static_cast<T>(0.7071067811865475);              // 1/√2
      const T inv_sqrt_2pi = static_cast<T>(0.3989422804014327);  // 1/√(2π)
      scale_by_derivative(g, x, dx, n, [=](T v) {
        const T cdf = T(0.5) * (T(1) + std::erf(v * r));        // Φ(x)
        const T pdf = inv_sqrt_2pi * std::exp(T(-0.5) * v * v);  // φ(x)
        return cdf + v * pdf;
      });
    }
  });
}

}  // namespace tessera
