#include "kernels/qk_layer_norm/qk_layer_norm.h"

#include <algorithm>

#include "kernels/common/dispatch.h"
#include "kernels/common/normalize.h"
#include "kernels/common/normalize_checks.h"
#include "kernels/layer_norm/layer_norm.h"
#include "kernels/qk_layer_norm_backward/qk_layer_norm_backward.h"

namespace tessera {

Tensor qk_layer_norm(const Tensor& y, int64_t q_cols, const Tensor& gq, const Tensor& bq, const Tensor& gk,
                     const Tensor& bk, double eps, DType out) {
  return call<op::QkLayerNorm>({q_cols, eps, out}, {y, gq, bq, gk, bk})[0];
}

namespace detail {
int64_t qk_norm_k_cols(const char* op, int64_t width, int64_t q_cols) {
  TS_CHECK(q_cols >= 1 && width - q_cols >= 2 && (width - q_cols) % 2 == 0, ValueError,
           op << ": rows of " << width << " columns with q_cols " << q_cols
              << " do not split into q and two equal, non-empty k and v column ranges");
  return (width - q_cols) / 2;
}
}  // namespace detail

std::vector<TensorMeta> op::QkLayerNorm::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 5);
  const TensorMeta& y = in[0];
  detail::check_norm_input(kName, y);
  detail::check_norm_eps(kName, attrs.eps);
  const int64_t ck = detail::qk_norm_k_cols(kName, y.shape[-1], attrs.q_cols);
  const char* names[] = {"gq", "bq", "gk", "bk"};
  for (size_t i = 1; i < 5; ++i) {
    const TensorMeta want{Shape{i < 3 ? attrs.q_cols : ck}, y.dtype, y.device};
    TS_CHECK(in[i] == want, ShapeError, kName << ": " << names[i - 1] << " " << in[i] << " must be " << want
                                              << " for y " << y << " with q_cols " << attrs.q_cols);
  }
  const DType out = attrs.out.value_or(y.dtype);
  TS_CHECK(out == y.dtype || (y.dtype == DType::f32 && is_half(out)), DTypeError,
           kName << ": output dtype " << out << " for y " << y << " (y's dtype, or bf16/f16 for f32 y)");
  const TensorMeta stats{detail::layer_norm_stats_shape(y.shape), detail::layer_norm_stats_dtype(y.dtype), y.device};
  return {TensorMeta{y.shape, out, y.device}, stats, stats, stats, stats};
}

// A bf16/f16 out arrives as an f32 buffer (rounded once by the op machinery), like y.
void op::QkLayerNorm::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const int64_t w = in[0].shape()[-1], rows = in[0].numel() / w, cq = attrs.q_cols;
  const int64_t ck = (w - cq) / 2;
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* y = in[0].data<T>();
    const T *gq = in[1].data<T>(), *bq = in[2].data<T>(), *gk = in[3].data<T>(), *bk = in[4].data<T>();
    T* o = out[0].data<T>();
    T *mean_q = out[1].data<T>(), *rstd_q = out[2].data<T>(), *mean_k = out[3].data<T>(), *rstd_k = out[4].data<T>();
#pragma omp parallel for if (rows * w > kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const T* yr = y + r * w;
      T* orow = o + r * w;
      cpu::normalize_group<T>(yr, orow, cq, gq, bq, attrs.eps, mean_q[r], rstd_q[r]);
      cpu::normalize_group<T>(yr + cq, orow + cq, ck, gk, bk, attrs.eps, mean_k[r], rstd_k[r]);
      std::copy(yr + cq + ck, yr + w, orow + cq + ck);
    }
  });
}

std::vector<Tensor> op::QkLayerNorm::backward(const BackwardContext& ctx, const Attrs&) {
  return qk_layer_norm_backward(ctx.grad_output(0), ctx.input(0), ctx.output(1), ctx.output(2), ctx.output(3),
                                ctx.output(4), ctx.input(1), ctx.input(3));
}

}  // namespace tessera
