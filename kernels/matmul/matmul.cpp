#include "kernels/common/eigen_maps.h"
#include "kernels/matmul/matmul.h"

#include <Eigen/Core>

#include "core/autocast.h"
#include "kernels/cast/cast.h"
#include "kernels/common/dispatch.h"

namespace tessera {

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  if (autocast::applies({&a, &b}))
    return call<op::Matmul>({trans_a, trans_b, true}, {autocast::operand(a), autocast::operand(b)})[0];
  return call<op::Matmul>({trans_a, trans_b, false}, {a, b})[0];
}

std::vector<TensorMeta> op::Matmul::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 2);
  check_floating(kName, in[0], "A");
  check_same_dtype(kName, in[0], in[1]);
  TS_CHECK(!attrs.f32_output || is_half(in[0].dtype), DTypeError,
           "matmul: an f32 output needs bf16 or f16 inputs, got A " << in[0] << " and B " << in[1]);
  const Shape &sa = in[0].shape, &sb = in[1].shape;
  TS_CHECK((sa.ndim() == 2 || sa.ndim() == 3) && sa.ndim() == sb.ndim(), ShapeError,
           "matmul: expected two 2-D or two 3-D tensors, got A " << sa << " and B " << sb);
  const int r = sa.ndim();
  if (r == 3)
    TS_CHECK(sa[0] == sb[0], ShapeError, "matmul: batch sizes differ: A " << sa << ", B " << sb);
  const int64_t m = attrs.trans_a ? sa[r - 1] : sa[r - 2], ka = attrs.trans_a ? sa[r - 2] : sa[r - 1];
  const int64_t kb = attrs.trans_b ? sb[r - 1] : sb[r - 2], n = attrs.trans_b ? sb[r - 2] : sb[r - 1];
  TS_CHECK(ka == kb, ShapeError,
           "matmul: inner sizes differ: A " << sa << (attrs.trans_a ? "ᵀ" : "") << " has " << ka << ", B " << sb
                                            << (attrs.trans_b ? "ᵀ" : "") << " has " << kb);
  Shape out = r == 2 ? Shape{m, n} : Shape{sa[0], m, n};
  return {TensorMeta{out, attrs.f32_output ? DType::f32 : in[0].dtype, in[0].device}};
}

namespace {

using cpu::RowMap;
using cpu::ConstRowMap;

// One GEMM on row-major buffers: C[m,n] = op(A)·op(B).
template <class T>
void gemm(const T* pa, const T* pb, T* pc, int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  ConstRowMap<T> A(pa, ta ? k : m, ta ? m : k);
  ConstRowMap<T> B(pb, tb ? n : k, tb ? k : n);
  RowMap<T> C(pc, m, n);
  if (!ta && !tb) C.noalias() = A * B;
  else if (ta && !tb) C.noalias() = A.transpose() * B;
  else if (!ta && tb) C.noalias() = A * B.transpose();
  else C.noalias() = A.transpose() * B.transpose();
}

}  // namespace

void op::Matmul::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& sc = out[0].shape();
  const int r = sc.ndim();
  const int64_t batch = r == 3 ? sc[0] : 1, m = sc[r - 2], n = sc[r - 1];
  const Shape& sa = in[0].shape();
  const int64_t k = attrs.trans_a ? sa[r - 2] : sa[r - 1];
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a = in[0].data<T>();
    const T* b = in[1].data<T>();
    T* c = out[0].data<T>();
    if (k == 0) {  // empty inner dim: C = 0
      std::fill(c, c + out[0].numel(), T(0));
      return;
    }
    auto one = [&](int64_t i) { gemm<T>(a + i * m * k, b + i * k * n, c + i * m * n, m, n, k, attrs.trans_a, attrs.trans_b); };
    if (batch > 1 && m * n * k < (int64_t{1} << 21)) {
      // Small matrices in a batch: one per thread (Eigen then runs single-threaded inside).
#pragma omp parallel for
      for (int64_t i = 0; i < batch; ++i) one(i);
    } else {
      // Large ones: one at a time, each GEMM multithreaded by Eigen. (No enclosing omp region
      // here, not even an inactive one: Eigen's nested team would then come from a second
      // thread pool, whose threads spin against the first one's on a small machine.)
      for (int64_t i = 0; i < batch; ++i) one(i);
    }
  });
}

Tensor matmul_grad(const BackwardContext& ctx, int input, const Tensor& a, const Tensor& b, bool trans_a,
                   bool trans_b) {
  if (is_half(a.dtype()) && ctx.input_grad_may_be_f32(input))  // f32 sums kept, no rounding and no cast back
    return call<op::Matmul>({trans_a, trans_b, true}, {a, b})[0];
  return matmul(a, b, trans_a, trans_b);
}

std::vector<Tensor> op::Matmul::backward(const BackwardContext& ctx, const Attrs& attrs) {
  // An f32 output of bf16/f16 inputs: the gradients are in the inputs' dtype (one cast of G);
  // b's (the weight side: linear layers, a tied output projection) in f32 when b is a cast of
  // an f32 tensor (matmul_grad). a's stays in its dtype: activations' gradients are rounded as
  // the forward rounds them (autocast equals explicit casts bit for bit).
  const Tensor g = attrs.f32_output ? cast(ctx.grad_output(), ctx.input_meta(0).dtype) : ctx.grad_output();
  const bool ta = attrs.trans_a, tb = attrs.trans_b;
  Tensor da, db;
  if (ctx.needs_input_grad(0)) {
    const Tensor& b = ctx.input(1);
    da = ta ? matmul(b, g, tb, true) : matmul(g, b, false, !tb);
  }
  if (ctx.needs_input_grad(1)) {
    const Tensor& a = ctx.input(0);
    db = tb ? matmul_grad(ctx, 1, g, a, true, ta) : matmul_grad(ctx, 1, a, g, !ta, false);
  }
  return {da, db};
}

}  // namespace tessera
