#include "kernels/log_softmax/log_softmax.h"

#include <algorithm>
#include <cmath>

#include "kernels/common/array_map.h"
#include "kernels/log_softmax_backward/log_softmax_backward.h"

namespace tessera {

Tensor log_softmax(const Tensor& x) { return call<op::LogSoftmax>({}, {x})[0]; }

std::vector<TensorMeta> op::LogSoftmax::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  check_num_inputs(kName, in, 1);
  check_floating(kName, in[0]);
  TS_CHECK(in[0].shape.ndim() >= 1, ShapeError, "log_softmax: input must have at least 1 dim, got " << in[0]);
  return {in[0]};
}

void op::LogSoftmax::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const int64_t c = in[0].shape()[-1];
  if (in[0].numel() == 0) return;
  const int64_t rows = in[0].numel() / c;
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    // Per row [C]: lse = max + log(sum_j exp(x_j − max)) (sum in double); y_j = x_j − lse.
#pragma omp parallel for if (rows * c > kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      cpu::ConstArrayMap<T> xr(x + r * c, c);
      cpu::ArrayMap<T> yr(y + r * c, c);
      const T mx = xr.maxCoeff();
      const double lse = static_cast<double>(mx) + std::log((xr - mx).exp().template cast<double>().sum());
      yr = (xr.template cast<double>() - lse).template cast<T>();  // in double: lse may be large
    }
  });
}

std::vector<Tensor> op::LogSoftmax::backward(const BackwardContext& ctx, const Attrs&) {
  return {log_softmax_backward(ctx.grad_output(), ctx.output(0))};
}

}  // namespace tessera
