#include "kernels/cross_entropy/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "kernels/common/array_map.h"
#include "kernels/cross_entropy_backward/cross_entropy_backward.h"

namespace tessera {

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions opts) {
  return call<op::CrossEntropy>({opts.ignore_index_, opts.reduction_}, {logits, targets})[0];
}

namespace detail {

void check_cross_entropy_args(const char* op, const TensorMeta& logits, const TensorMeta& targets) {
  check_floating(op, logits, "logits");
  TS_CHECK(logits.shape.ndim() == 2, ShapeError, op << ": logits must be [N, V], got " << logits);
  TS_CHECK(logits.shape[1] > 0, ShapeError, op << ": logits " << logits << " have no classes (V = 0)");
  TS_CHECK(targets.dtype == DType::i32, DTypeError,
           op << ": targets must be i32 class indices, got " << targets);
  TS_CHECK(targets.shape.ndim() == 1 && targets.shape[0] == logits.shape[0], ShapeError,
           op << ": targets " << targets << " must be [N] for logits " << logits);
}

void check_cross_entropy_targets(const char* op, const Tensor& targets, int64_t v, int32_t ignore_index) {
  const int32_t* t = targets.data<int32_t>();
  for (int64_t i = 0; i < targets.numel(); ++i)
    TS_CHECK(t[i] == ignore_index || (t[i] >= 0 && t[i] < v), ValueError,
             op << ": target " << t[i] << " at row " << i << " is outside [0, " << v << ") (V = " << v
                << ") and is not ignore_index " << ignore_index);
}

}  // namespace detail

std::vector<TensorMeta> op::CrossEntropy::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 2);
  detail::check_cross_entropy_args(kName, in[0], in[1]);
  Shape out = attrs.reduction == Reduction::none ? Shape{in[0].shape[0]} : Shape{};
  return {TensorMeta{out, in[0].dtype, in[0].device}};
}

void op::CrossEntropy::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const int64_t n = in[0].shape()[0], v = in[0].shape()[1];
  detail::check_cross_entropy_targets(kName, in[1], v, attrs.ignore_index);  // before any parallel loop
  const int32_t* t = in[1].data<int32_t>();
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = in[0].data<T>();
    // loss_i = lse_i − x[i, t_i], lse_i = max_i + log(sum_j exp(x_ij − max_i)); 0 for ignored rows.
    auto row_loss = [&](int64_t i) -> double {
      if (t[i] == attrs.ignore_index) return 0.0;
      cpu::ConstArrayMap<T> xr(x + i * v, v);
      const T mx = xr.maxCoeff();
      const double s = (xr - mx).exp().template cast<double>().sum();
      return static_cast<double>(mx) + std::log(s) - static_cast<double>(xr[t[i]]);
    };
    if (attrs.reduction == Reduction::none) {
      T* y = out[0].data<T>();
#pragma omp parallel for if (n * v > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(row_loss(i));
      return;
    }
    double total = 0;
    int64_t count = 0;
#pragma omp parallel for reduction(+ : total, count) if (n * v > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      total += row_loss(i);
      count += t[i] != attrs.ignore_index;
    }
    // mean over the non-ignored rows; 0 (not 0/0) when all are ignored.
    if (attrs.reduction == Reduction::mean) total = count > 0 ? total / static_cast<double>(count) : 0.0;
    out[0].data<T>()[0] = static_cast<T>(total);
  });
}

std::vector<Tensor> op::CrossEntropy::backward(const BackwardContext& ctx, const Attrs& attrs) {
  if (!ctx.needs_input_grad(0)) return {Tensor(), Tensor()};
  CrossEntropyOptions opts =
      CrossEntropyOptions().ignore_index(attrs.ignore_index).reduction(attrs.reduction);
  return {cross_entropy_backward(ctx.input(0), ctx.input(1), ctx.grad_output(), opts), Tensor()};
}

}  // namespace tessera
