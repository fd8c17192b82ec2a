#include "kernels/causal_softmax_backward/causal_softmax_backward.h"

#include "kernels/causal_softmax/causal_softmax.h"
#include "kernels/common/dispatch.h"

namespace tessera {

Tensor causal_softmax_backward(const Tensor& g, const Tensor& y, double scale) {
  return call<op::CausalSoftmaxBackward>({scale}, {g, y})[0];
}

std::vector<TensorMeta> op::CausalSoftmaxBackward::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 2);
  detail::check_causal_scores(kName, in[0], attrs.scale, "g");
  check_same_dtype(kName, in[0], in[1]);
  TS_CHECK(in[0].shape == in[1].shape, ShapeError,
           kName << ": g " << in[0] << " and y " << in[1] << " must have one shape");
  return {in[0]};
}

void op::CausalSoftmaxBackward::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                const Attrs& attrs) {
  if (in[0].numel() == 0) return;
  const int64_t T = in[0].shape()[-2], S = in[0].shape()[-1], rows = in[0].numel() / S;
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T_ = typename decltype(tag)::type;
    const T_* g = in[0].data<T_>();
    const T_* y = in[1].data<T_>();
    T_* dx = out[0].data<T_>();
    const T_ sc = static_cast<T_>(attrs.scale);
    // Row r (query t = r mod T) sees keys s < n = t + S − T + 1:
    //   d = Σ_{s<n} g_s·y_s (in double),  dx_s = sc·y_s·(g_s − d) for s < n, 0 above.
#pragma omp parallel for if (rows * S > kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = r % T + S - T + 1;
      const T_* gr = g + r * S;
      const T_* yr = y + r * S;
      T_* dr = dx + r * S;
      double d = 0;
      for (int64_t s = 0; s < n; ++s) d += static_cast<double>(gr[s]) * static_cast<double>(yr[s]);
      const T_ dt = static_cast<T_>(d);
      for (int64_t s = 0; s < n; ++s) dr[s] = sc * yr[s] * (gr[s] - dt);
      for (int64_t s = n; s < S; ++s) dr[s] = T_(0);
    }
  });
}

}  // namespace tessera
