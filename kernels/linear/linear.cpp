#include "kernels/common/eigen_maps.h"
#include "kernels/linear/linear.h"

#include <Eigen/Core>

#include "core/autocast.h"
#include "kernels/cast/cast.h"
#include "kernels/cast_col_sum/cast_col_sum.h"
#include "kernels/col_sum/col_sum.h"
#include "kernels/common/dispatch.h"
#include "kernels/matmul/matmul.h"
#include "kernels/sum/sum.h"

namespace tessera {

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (!b.defined()) return matmul(x, w);
  // Autocast as matmul: x, W to the low dtype, f32 sums and y; b is added as it is (f32).
  if (autocast::applies({&x, &w}))
    return call<op::Linear>({true}, {autocast::operand(x), autocast::operand(w), b})[0];
  return call<op::Linear>({false}, {x, w, b})[0];
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, DType out) {
  if (autocast::applies({&x, &w}) && out == autocast::dtype()) {  // y rounded once, in the low dtype
    if (!b.defined()) return matmul(autocast::operand(x), autocast::operand(w));
    return call<op::Linear>({false, true}, {autocast::operand(x), autocast::operand(w),
                                            b.dtype() == DType::f32 ? b : cast(b, DType::f32)})[0];
  }
  Tensor y = linear(x, w, b);
  TS_CHECK(y.dtype() == out, DTypeError,
           "linear: output dtype " << dtype_name(out) << " asked for x " << x.meta() << " and W " << w.meta()
                                   << ", which give " << dtype_name(y.dtype())
                                   << " (another dtype only as autocast's low dtype)");
  return y;
}

std::vector<TensorMeta> op::Linear::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 3);
  const TensorMeta &x = in[0], &w = in[1], &b = in[2];
  check_floating(kName, x, "x");
  TS_CHECK(x.dtype == w.dtype, DTypeError, "linear: x " << x << " and W " << w << " must share a dtype");
  TS_CHECK(!attrs.f32_output || is_half(x.dtype), DTypeError,
           "linear: an f32 output needs bf16 or f16 x and W, got x " << x << " and W " << w);
  TS_CHECK(!attrs.f32_bias || (is_half(x.dtype) && !attrs.f32_output), DTypeError,
           "linear: an f32 bias goes with bf16 or f16 x, W and output, got x "
               << x << " and W " << w << (attrs.f32_output ? " with an f32 output" : ""));
  const DType out_dtype = attrs.f32_output ? DType::f32 : x.dtype;
  const DType b_dtype = attrs.f32_bias ? DType::f32 : out_dtype;
  TS_CHECK(b.dtype == b_dtype, DTypeError,
           "linear: b " << b << " must be " << dtype_name(b_dtype)
                        << (attrs.f32_bias ? " (f32_bias)" : " (the output's dtype)") << " for x " << x << " and W "
                        << w << (attrs.f32_output ? " with an f32 output" : ""));
  TS_CHECK(x.shape.ndim() == 2 && w.shape.ndim() == 2 && b.shape.ndim() == 1, ShapeError,
           "linear: expected x [N, K], W [K, M] and b [M], got x " << x.shape << ", W " << w.shape << " and b "
                                                                   << b.shape);
  TS_CHECK(x.shape[1] == w.shape[0] && b.shape[0] == w.shape[1], ShapeError,
           "linear: sizes differ: x " << x.shape << " · W " << w.shape << " + b " << b.shape
                                      << " needs x [N, K], W [K, M], b [M]");
  return {TensorMeta{Shape{x.shape[0], w.shape[1]}, out_dtype, x.device}};
}

namespace {

using cpu::RowMap;
using cpu::ConstRowMap;

template <class T>
using RowVec = Eigen::Matrix<T, 1, Eigen::Dynamic>;

}  // namespace

// Y [N, M] = X [N, K]·W [K, M] (Eigen's multithreaded GEMM), then every row += b.
// bf16/f16 arrive widened to f32 (the op machinery), so T is float or double.
void op::Linear::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const int64_t n = in[0].size(0), k = in[0].size(1), m = in[1].size(1);
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ConstRowMap<T> X(in[0].data<T>(), n, k);
    ConstRowMap<T> W(in[1].data<T>(), k, m);
    Eigen::Map<const RowVec<T>> B(in[2].data<T>(), m);
    RowMap<T> Y(out[0].data<T>(), n, m);
    if (n == 0 || m == 0) return;
    if (k == 0) Y.setZero();  // empty inner dim: y = b
    else Y.noalias() = X * W;
    Y.rowwise() += B;
  });
}

std::vector<Tensor> op::Linear::backward(const BackwardContext& ctx, const Attrs& attrs) {
  const Tensor& dy = ctx.grad_output();
  // The GEMMs run in x's dtype: an f32 output of bf16/f16 inputs casts dy once — in the same
  // pass as db's column sums when both are wanted (cast_col_sum reads dy once).
  const bool gemm_grads = ctx.needs_input_grad(0) || ctx.needs_input_grad(1);
  Tensor g = dy, dx, dw, db;
  if (attrs.f32_bias && ctx.needs_input_grad(2)) {  // dy in x's dtype already; db summed in f32
    db = col_sum(dy);
  } else if (attrs.f32_output && gemm_grads && ctx.needs_input_grad(2)) {
    std::vector<Tensor> gs = cast_col_sum(dy, ctx.input_meta(0).dtype);
    g = gs[0];
    db = gs[1];
  } else if (attrs.f32_output && gemm_grads) {
    g = cast(dy, ctx.input_meta(0).dtype);
  }
  if (ctx.needs_input_grad(0)) dx = matmul(g, ctx.input(1), false, true);    // [N, M]·[K, M]ᵀ
  if (ctx.needs_input_grad(1)) dw = matmul_grad(ctx, 1, ctx.input(0), g, true, false);  // [N, K]ᵀ·[N, M]
  if (ctx.needs_input_grad(2) && !db.defined()) db = sum(dy, 0);             // b's dtype = dy's
  return {dx, dw, db};
}

}  // namespace tessera
