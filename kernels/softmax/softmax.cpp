#include "kernels/softmax/softmax.h"

#include <algorithm>
#include <cmath>

#include "kernels/common/array_map.h"
#include "kernels/mul/mul.h"
#include "kernels/sub/sub.h"
#include "kernels/sum/sum.h"

namespace tessera {

Tensor softmax(const Tensor& x) { return call<op::Softmax>({}, {x})[0]; }

std::vector<TensorMeta> op::Softmax::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  check_num_inputs(kName, in, 1);
  check_floating(kName, in[0]);
  TS_CHECK(in[0].shape.ndim() >= 1, ShapeError, "softmax: input must have at least 1 dim, got " << in[0]);
  return {in[0]};
}

void op::Softmax::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const int64_t c = in[0].shape()[-1];
  if (in[0].numel() == 0) return;
  const int64_t rows = in[0].numel() / c;
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    // Per row [C]: e_j = exp(x_j − max), y_j = e_j / sum(e); the sum is accumulated in double.
#pragma omp parallel for if (rows * c > kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      cpu::ConstArrayMap<T> xr(x + r * c, c);
      cpu::ArrayMap<T> yr(y + r * c, c);
      yr = (xr - xr.maxCoeff()).exp();
      yr *= static_cast<T>(1.0 / yr.template cast<double>().sum());
    }
  });
}

std::vector<Tensor> op::Softmax::backward(const BackwardContext& ctx, const Attrs&) {
  const Tensor& g = ctx.grad_output();
  const Tensor& y = ctx.output(0);
  // dx = y · (g − sum(g·y)) with the row sum [..., 1] broadcast over the last dim.
  return {mul(y, sub(g, sum(mul(g, y), -1, /*keepdim=*/true)))};
}

}  // namespace tessera
