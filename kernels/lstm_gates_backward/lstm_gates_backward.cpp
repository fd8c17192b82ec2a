#include "kernels/lstm_gates_backward/lstm_gates_backward.h"

#include "kernels/common/dispatch.h"

namespace tessera {

std::vector<Tensor> lstm_gates_backward(const Tensor& dh, const Tensor& dc, const Tensor& gates,
                                        const Tensor& tanh_c, const Tensor& c_prev) {
  return call<op::LstmGatesBackward>({}, {dh, dc, gates, tanh_c, c_prev});
}

std::vector<TensorMeta> op::LstmGatesBackward::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  check_num_inputs(kName, in, 5);
  const TensorMeta& gates = in[2];
  check_floating(kName, gates, "gates");
  TS_CHECK(gates.shape.ndim() == 2 && gates.shape[1] % 4 == 0, ShapeError,
           "lstm_gates_backward: gates must be [N, 4H], got " << gates);
  const TensorMeta state{Shape({gates.shape[0], gates.shape[1] / 4}), gates.dtype, gates.device};
  const char* names[] = {"dh", "dc", "gates", "tanh_c", "c_prev"};
  for (int k : {0, 1, 3, 4})
    TS_CHECK(in[k] == state, ShapeError,
             "lstm_gates_backward: " << names[k] << " " << in[k] << " must be " << state << " for gates "
                                     << gates);
  return {gates, state};  // dpre, dc_prev
}

void op::LstmGatesBackward::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const int64_t n = in[2].shape()[0], hs = in[2].shape()[1] / 4;
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dh = in[0].data<T>();      // [N, H]
    const T* dc = in[1].data<T>();      // [N, H]
    const T* gates = in[2].data<T>();   // [N, 4H]: i, f, o, u
    const T* tanh_c = in[3].data<T>();  // [N, H]
    const T* c_prev = in[4].data<T>();  // [N, H]
    T* dpre = out[0].data<T>();         // [N, 4H]
    T* dc_prev = out[1].data<T>();      // [N, H]
#pragma omp parallel for if (n * hs * 4 > kParallelGrain)
    for (int64_t r = 0; r < n; ++r) {
      const T* g = gates + r * 4 * hs;
      T* dp = dpre + r * 4 * hs;
      for (int64_t j = 0; j < hs; ++j) {
        const int64_t k = r * hs + j;
        const T i = g[j], f = g[hs + j], o = g[2 * hs + j], u = g[3 * hs + j], tc = tanh_c[k];
        // total gradient at c: from later steps, and through h = o·tanh(c)
        const T dct = dc[k] + dh[k] * o * (T(1) - tc * tc);
        dp[j] = dct * u * i * (T(1) - i);               // d/d pre_i
        dp[hs + j] = dct * c_prev[k] * f * (T(1) - f);  // d/d pre_f
        dp[2 * hs + j] = dh[k] * tc * o * (T(1) - o);   // d/d pre_o
        dp[3 * hs + j] = dct * i * (T(1) - u * u);      // d/d pre_u
        dc_prev[k] = dct * f;
      }
    }
  });
}

}  // namespace tessera
