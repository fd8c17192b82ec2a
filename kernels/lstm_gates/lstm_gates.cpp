#include "kernels/lstm_gates/lstm_gates.h"

#include <cmath>

#include "kernels/common/dispatch.h"
#include "kernels/lstm_gates_backward/lstm_gates_backward.h"

namespace tessera {

std::pair<Tensor, Tensor> lstm_gates(const Tensor& pre, const Tensor& c_prev, double forget_bias) {
  std::vector<Tensor> out = call<op::LstmGates>({forget_bias}, {pre, c_prev});
  return {out[0], out[1]};
}

std::vector<TensorMeta> op::LstmGates::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 2);
  const TensorMeta& pre = in[0];
  const TensorMeta& c_prev = in[1];
  check_floating(kName, pre, "pre");
  check_floating(kName, c_prev, "c_prev");
  TS_CHECK(pre.shape.ndim() == 2 && pre.shape[1] % 4 == 0, ShapeError,
           "lstm_gates: pre must be [N, 4H] (gates i, f, o, u), got " << pre);
  const int64_t n = pre.shape[0], h = pre.shape[1] / 4;
  TS_CHECK(c_prev.shape == Shape({n, h}), ShapeError,
           "lstm_gates: c_prev " << c_prev << " must be [" << n << ", " << h << "] for pre " << pre);
  TS_CHECK(c_prev.dtype == pre.dtype, DTypeError,
           "lstm_gates: pre " << pre << " and c_prev " << c_prev << " differ in dtype");
  TS_CHECK(std::isfinite(attrs.forget_bias), ValueError,
           "lstm_gates: forget_bias must be finite, got " << attrs.forget_bias);
  return {c_prev, c_prev, pre, c_prev};  // h, c, gates, tanh_c
}

void op::LstmGates::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const int64_t n = in[0].shape()[0], hs = in[0].shape()[1] / 4;
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pre = in[0].data<T>();     // [N, 4H]
    const T* c_prev = in[1].data<T>();  // [N, H]
    T* h = out[0].data<T>();            // [N, H]
    T* c = out[1].data<T>();            // [N, H]
    T* gates = out[2].data<T>();        // [N, 4H]: i, f, o, u activated
    T* tanh_c = out[3].data<T>();       // [N, H]
    const T fb = static_cast<T>(attrs.forget_bias);
    // σ(x) = 1/(1+e^-x): exp overflows to inf for very negative x and gives 0, never NaN.
    auto sigmoid = [](T x) { return T(1) / (T(1) + std::exp(-x)); };
    // A unit costs five exponentials (three sigmoids, two tanh), some 16 plain elementwise
    // elements' worth: split across threads from kParallelGrain / 16 units (the trainers' default
    // sparse LSTM, B 32 × H 256, ran on one thread before, its gates 38% of the CPU step).
#pragma omp parallel for if (n * hs > kParallelGrain / 16)
    for (int64_t r = 0; r < n; ++r) {
      const T* p = pre + r * 4 * hs;
      T* g = gates + r * 4 * hs;
      for (int64_t j = 0; j < hs; ++j) {
        const T i = sigmoid(p[j]);
        const T f = sigmoid(p[hs + j] + fb);
        const T o = sigmoid(p[2 * hs + j]);
        const T u = std::tanh(p[3 * hs + j]);
        const int64_t k = r * hs + j;
        const T cv = f * c_prev[k] + i * u;
        const T tc = std::tanh(cv);
        g[j] = i, g[hs + j] = f, g[2 * hs + j] = o, g[3 * hs + j] = u;
        c[k] = cv;
        tanh_c[k] = tc;
        h[k] = o * tc;
      }
    }
  });
}

std::vector<Tensor> op::LstmGates::backward(const BackwardContext& ctx, const Attrs&) {
  // dc may be the zeros BackwardContext makes when c itself was not used downstream.
  std::vector<Tensor> d = lstm_gates_backward(ctx.grad_output(0), ctx.grad_output(1), ctx.output(2),
                                              ctx.output(3), ctx.input(1));
  return {ctx.needs_input_grad(0) ? d[0] : Tensor(), ctx.needs_input_grad(1) ? d[1] : Tensor()};
}

}  // namespace tessera
