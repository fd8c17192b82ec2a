#include "kernels/causal_softmax/causal_softmax.h"

#include <algorithm>
#include <cmath>

#include "kernels/causal_softmax_backward/causal_softmax_backward.h"
#include "kernels/common/dispatch.h"

namespace tessera {

Tensor causal_softmax(const Tensor& x, double scale) { return call<op::CausalSoftmax>({scale}, {x})[0]; }

namespace detail {
void check_causal_scores(const char* op, const TensorMeta& x, double scale, const char* what) {
  check_floating(op, x, what);
  TS_CHECK(x.shape.ndim() >= 2, ShapeError, op << ": " << what << " " << x << " must be [..., T, S] (>= 2 dims)");
  const int64_t T = x.shape[-2], S = x.shape[-1];
  TS_CHECK(S >= T, ShapeError,
           op << ": " << what << " " << x << " has T=" << T << " queries but S=" << S
              << " keys; causal rows need S >= T (query t sees keys s <= t + S - T)");
  TS_CHECK(std::isfinite(scale), ValueError, op << ": scale must be finite, got " << scale);
}
}  // namespace detail

std::vector<TensorMeta> op::CausalSoftmax::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1);
  detail::check_causal_scores(kName, in[0], attrs.scale);
  return {in[0]};
}

void op::CausalSoftmax::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  if (in[0].numel() == 0) return;
  const int64_t T = in[0].shape()[-2], S = in[0].shape()[-1], rows = in[0].numel() / S;
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T_ = typename decltype(tag)::type;
    const T_* x = in[0].data<T_>();
    T_* y = out[0].data<T_>();
    const T_ sc = static_cast<T_>(attrs.scale);
    // Row r = (leading index, query t = r mod T) sees keys s < n = t + S − T + 1 (n >= 1):
    //   m = max_{s<n} sc·x_s,  e_s = exp(sc·x_s − m),  y_s = e_s / Σ e (sum in double), y_{s>=n} = 0.
#pragma omp parallel for if (rows * S > kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = r % T + S - T + 1;
      const T_* xr = x + r * S;
      T_* yr = y + r * S;
      T_ m = sc * xr[0];
      for (int64_t s = 1; s < n; ++s) m = std::max(m, sc * xr[s]);
      double sum = 0;
      for (int64_t s = 0; s < n; ++s) {
        yr[s] = std::exp(sc * xr[s] - m);
        sum += static_cast<double>(yr[s]);
      }
      const T_ inv = static_cast<T_>(1.0 / sum);
      for (int64_t s = 0; s < n; ++s) yr[s] *= inv;
      for (int64_t s = n; s < S; ++s) yr[s] = T_(0);
    }
  });
}

std::vector<Tensor> op::CausalSoftmax::backward(const BackwardContext& ctx, const Attrs& attrs) {
  return {causal_softmax_backward(ctx.grad_output(), ctx.output(0), attrs.scale)};
}

}  // namespace tessera
