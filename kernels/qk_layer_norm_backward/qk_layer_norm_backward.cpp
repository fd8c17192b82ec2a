#include "kernels/qk_layer_norm_backward/qk_layer_norm_backward.h"

#include "kernels/common/dispatch.h"
#include "kernels/common/normalize.h"
#include "kernels/common/normalize_checks.h"
#include "kernels/common/normalize_param_grads.h"
#include "kernels/layer_norm/layer_norm.h"
#include "kernels/qk_layer_norm/qk_layer_norm.h"

namespace tessera {

std::vector<Tensor> qk_layer_norm_backward(const Tensor& g, const Tensor& y, const Tensor& mean_q,
                                           const Tensor& rstd_q, const Tensor& mean_k, const Tensor& rstd_k,
                                           const Tensor& gq, const Tensor& gk) {
  return call<op::QkLayerNormBackward>({}, {g, y, mean_q, rstd_q, mean_k, rstd_k, gq, gk});
}

std::vector<TensorMeta> op::QkLayerNormBackward::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  check_num_inputs(kName, in, 8);
  const TensorMeta &g = in[0], &y = in[1];
  detail::check_norm_input(kName, y);
  TS_CHECK(g.shape == y.shape && g.device == y.device, ShapeError, kName << ": g " << g << " must match y " << y);
  TS_CHECK(g.dtype == y.dtype || (y.dtype == DType::f32 && is_half(g.dtype)), DTypeError,
           kName << ": g " << g << " for y " << y << " (y's dtype, or bf16/f16 for f32 y)");
  TS_CHECK(in[6].shape.ndim() == 1, ShapeError, kName << ": gq " << in[6] << " must be one-dimensional");
  const int64_t cq = in[6].shape[0], ck = detail::qk_norm_k_cols(kName, y.shape[-1], cq);
  const TensorMeta stats{detail::layer_norm_stats_shape(y.shape), detail::layer_norm_stats_dtype(y.dtype), y.device};
  detail::check_norm_stats(kName, in[2], in[3], stats, "y " + y.str() + " (q)");
  detail::check_norm_stats(kName, in[4], in[5], stats, "y " + y.str() + " (k)");
  const TensorMeta pq{Shape{cq}, y.dtype, y.device}, pk{Shape{ck}, y.dtype, y.device};
  TS_CHECK(in[6] == pq, ShapeError, kName << ": gq " << in[6] << " must be " << pq << " for y " << y);
  TS_CHECK(in[7] == pk, ShapeError, kName << ": gk " << in[7] << " must be " << pk << " for y " << y);
  return {y, pq, pq, pk, pk};
}

namespace {

// layer_norm's backward on the columns [col0, col0 + n) of rows of `ld` elements: dx there, and
// dgamma, dbeta [n] (the deterministic row-block reduction of normalize_param_grads.h).
template <class T>
void segment_backward(const T* g, const T* x, const T* mean, const T* rstd, const T* gamma, T* dx, int64_t rows,
                      int64_t ld, int64_t col0, int64_t n, T* dgamma, T* dbeta) {
  auto block_rows = [&](int64_t r0, int64_t r1, double* dgamma_b, double* dbeta_b) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t at = r * ld + col0;
      cpu::normalize_group_backward<T>(g + at, x + at, n, mean[r], rstd[r], gamma, dx + at, dgamma_b, dbeta_b);
    }
  };
  cpu::reduce_norm_param_grads<T>(rows, n, dgamma, dbeta, block_rows);
}

}  // namespace

// A bf16/f16 g arrives widened to f32 (exact) by the op machinery: the f32 kernel as for cast(g, f32).
void op::QkLayerNormBackward::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const int64_t w = in[1].shape()[-1], rows = in[1].numel() / w, cq = in[6].shape()[0];
  const int64_t ck = (w - cq) / 2;
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *g = in[0].data<T>(), *y = in[1].data<T>();
    T* dy = out[0].data<T>();
    segment_backward<T>(g, y, in[2].data<T>(), in[3].data<T>(), in[6].data<T>(), dy, rows, w, 0, cq,
                        out[1].data<T>(), out[2].data<T>());
    segment_backward<T>(g, y, in[4].data<T>(), in[5].data<T>(), in[7].data<T>(), dy, rows, w, cq, ck,
                        out[3].data<T>(), out[4].data<T>());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = cq + ck; j < w; ++j) dy[r * w + j] = g[r * w + j];
  });
}

}  // namespace tessera
