#include "kernels/cross_entropy_backward/cross_entropy_backward.h"

#include <algorithm>
#include <cmath>

#include "kernels/common/array_map.h"

namespace tessera {

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& g,
                              CrossEntropyOptions opts) {
  return call<op::CrossEntropyBackward>({opts.ignore_index_, opts.reduction_}, {logits, targets, g})[0];
}

std::vector<TensorMeta> op::CrossEntropyBackward::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 3);
  detail::check_cross_entropy_args(kName, in[0], in[1]);
  check_same_dtype(kName, in[0], in[2]);
  const Shape want = attrs.reduction == Reduction::none ? Shape{in[0].shape[0]} : Shape{};
  TS_CHECK(in[2].shape == want, ShapeError,
           "cross_entropy_backward: g " << in[2] << " must have shape " << want << " for logits " << in[0]);
  return {in[0]};
}

void op::CrossEntropyBackward::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                               const Attrs& attrs) {
  const int64_t n = in[0].shape()[0], v = in[0].shape()[1];
  detail::check_cross_entropy_targets(kName, in[1], v, attrs.ignore_index);  // before any parallel loop
  const int32_t* t = in[1].data<int32_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += t[i] != attrs.ignore_index;
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = in[0].data<T>();
    const T* g = in[2].data<T>();
    T* dx = out[0].data<T>();
    // Loss gradient of one row: g[i] (none), g (sum), g / count (mean; no row counts if count = 0).
    double g_all = 0.0;
    if (attrs.reduction == Reduction::sum) g_all = static_cast<double>(g[0]);
    if (attrs.reduction == Reduction::mean && count > 0)
      g_all = static_cast<double>(g[0]) / static_cast<double>(count);
#pragma omp parallel for if (n * v > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T* xr = x + i * v;
      T* dr = dx + i * v;
      if (t[i] == attrs.ignore_index) {
        std::fill(dr, dr + v, T(0));
        continue;
      }
      const double gr = attrs.reduction == Reduction::none ? static_cast<double>(g[i]) : g_all;
      // softmax_j = e_j / sum_k e_k with e_j = exp(x_j − max); dlogits_j = (softmax_j − [j == t]) · g_row.
      // e_j is parked in dr (sum in double), then scaled in place; the target column is redone
      // in double as (p_t − 1)·g, without first rounding p_t·g to T.
      cpu::ConstArrayMap<T> xrow(xr, v);
      cpu::ArrayMap<T> drow(dr, v);
      const T mx = xrow.maxCoeff();
      drow = (xrow - mx).exp();
      const double s = drow.template cast<double>().sum();
      drow *= static_cast<T>(gr / s);
      const double p_t = std::exp(static_cast<double>(xr[t[i]]) - static_cast<double>(mx)) / s;
      dr[t[i]] = static_cast<T>((p_t - 1.0) * gr);
    }
  });
}

}  // namespace tessera
