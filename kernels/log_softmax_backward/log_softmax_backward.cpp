#include "kernels/log_softmax_backward/log_softmax_backward.h"

#include <cmath>

#include "kernels/common/array_map.h"

namespace tessera {

Tensor log_softmax_backward(const Tensor& g, const Tensor& y) {
  return call<op::LogSoftmaxBackward>({}, {g, y})[0];
}

std::vector<TensorMeta> op::LogSoftmaxBackward::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  check_num_inputs(kName, in, 2);
  check_floating(kName, in[0], "g");
  check_same_dtype(kName, in[0], in[1]);
  TS_CHECK(in[0].shape == in[1].shape && in[0].shape.ndim() >= 1, ShapeError,
           "log_softmax_backward: g " << in[0] << " and y " << in[1] << " must be one shape of >= 1 dim");
  return {in[0]};
}

void op::LogSoftmaxBackward::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const int64_t c = in[0].shape()[-1];
  if (in[0].numel() == 0) return;
  const int64_t rows = in[0].numel() / c;
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = in[0].data<T>();
    const T* y = in[1].data<T>();
    T* dx = out[0].data<T>();
    // Per row [C]: dx_j = g_j − exp(y_j) · sum_k g_k.
#pragma omp parallel for if (rows * c > kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      cpu::ConstArrayMap<T> gr(g + r * c, c), yr(y + r * c, c);
      const T st = static_cast<T>(gr.template cast<double>().sum());
      cpu::ArrayMap<T>(dx + r * c, c) = gr - yr.exp() * st;
    }
  });
}

}  // namespace tessera
