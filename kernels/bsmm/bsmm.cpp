#include "kernels/bsmm/bsmm.h"

#include <Eigen/Core>

#include <algorithm>

#include "core/autocast.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/eigen_maps.h"
#include "kernels/ops.h"

namespace tessera {

namespace {

Tensor call_bsmm(const Tensor& x, const Tensor& w, const LayoutPtr& layout, const Tensor& gate, const Tensor& bias,
                 bool f32_output, bool f32_bias = false) {
  std::vector<Tensor> in{x, w};
  if (gate.defined()) in.push_back(gate);
  if (bias.defined()) in.push_back(bias);
  return call<op::Bsmm>({layout, gate.defined(), f32_output, bias.defined(), f32_bias && bias.defined()}, in)[0];
}

Tensor bias_in_f32(const Tensor& bias) {
  return bias.defined() && bias.dtype() != DType::f32 ? cast(bias, DType::f32) : bias;
}

}  // namespace

Tensor bsmm(const Tensor& x, const Tensor& w, const LayoutPtr& layout, const Tensor& gate, const Tensor& bias) {
  if (autocast::applies({&x, &w, &gate}))  // low-precision operands, f32 result written directly
    return call_bsmm(autocast::operand(x), autocast::operand(w), layout, autocast::operand(gate), bias_in_f32(bias),
                     true);
  return call_bsmm(x, w, layout, gate, bias, false);
}

Tensor bsmm(const Tensor& x, const Tensor& w, const LayoutPtr& layout, const Tensor& gate, const Tensor& bias,
            DType out) {
  if (autocast::applies({&x, &w, &gate}) && out == autocast::dtype())  // y rounded once, in the low dtype
    return call_bsmm(autocast::operand(x), autocast::operand(w), layout, autocast::operand(gate), bias_in_f32(bias),
                     false, true);
  Tensor y = bsmm(x, w, layout, gate, bias);
  TS_CHECK(y.dtype() == out, DTypeError,
           "bsmm: output dtype " << dtype_name(out) << " asked for x " << x.meta() << " and w " << w.meta()
                                 << ", which give " << dtype_name(y.dtype())
                                 << " (another dtype only as autocast's low dtype)");
  return y;
}

namespace detail {

void bsmm_check_layout(const char* op, const LayoutPtr& layout) {
  TS_CHECK(layout != nullptr, ValueError, op << ": no block layout given");
}

void bsmm_check_2d(const char* op, const TensorMeta& a, const char* what, int64_t features, const char* fname,
                   const BlockLayout& layout) {
  check_floating(op, a, what);
  TS_CHECK(a.shape.ndim() == 2 && a.shape[1] == features, ShapeError,
           op << ": " << what << " " << a.shape << " must be [N, " << features << "] (" << fname << " of "
              << layout.str() << ")");
}

void bsmm_check_weight(const char* op, const TensorMeta& w, const TensorMeta& a, const BlockLayout& layout) {
  check_same_dtype(op, a, w);
  const int64_t bs = layout.block_size();
  TS_CHECK(w.shape == Shape({layout.nnz(), bs, bs}), ShapeError,
           op << ": weight " << w.shape << " must be [nnz, bs, bs] = " << Shape({layout.nnz(), bs, bs}) << " for "
              << layout.str() << " (other input " << a.shape << ")");
}

void bsmm_check_gate(const char* op, const TensorMeta& gate, const TensorMeta& a, const BlockLayout& layout) {
  check_same_dtype(op, a, gate);
  TS_CHECK(gate.shape == Shape({layout.nnz()}), ShapeError,
           op << ": gate " << gate.shape << " must be [nnz] = " << Shape({layout.nnz()}) << " for " << layout.str()
              << " (other input " << a.shape << ")");
}

std::pair<Tensor, Tensor> bsmm_weight_gate_grads(const Tensor& a, const Tensor& b, const Tensor& w,
                                                 const Tensor& gate, const LayoutPtr& layout,
                                                 const BackwardContext& ctx) {
  const bool need_w = ctx.needs_input_grad(1), need_gate = gate.defined() && ctx.needs_input_grad(2);
  if (!need_w && !need_gate) return {};
  // P[k] = A_rᵀ·B_c [nnz, bs, bs], in f32 straight from the kernel when a gradient may be f32
  const bool half = is_half(a.dtype());
  if (!gate.defined()) return {bsmm_dw(a, b, layout, Tensor(), half && ctx.input_grad_may_be_f32(1)), Tensor()};
  // gated: dW = gate·P and dgate = sum P ⊙ w from one kernel (the gate epilogue)
  const bool wide_w = need_w && half && ctx.input_grad_may_be_f32(1);
  const bool wide_gate = need_gate && half && ctx.input_grad_may_be_f32(2);
  auto [dw, dgate] = bsmm_dw_gated(a, b, w, gate, layout, wide_w || wide_gate);
  if (need_w && !wide_w && dw.dtype() != w.dtype()) dw = cast(dw, w.dtype());
  if (need_gate && !wide_gate && dgate.dtype() != gate.dtype()) dgate = cast(dgate, gate.dtype());
  return {need_w ? dw : Tensor(), need_gate ? dgate : Tensor()};
}

}  // namespace detail

namespace {

using cpu::RowMat;
using cpu::ConstRowMap;
using cpu::StridedRowMap;

// y [N, K] = block-sparse x [N, C] · w. One task per (row tile, output block column c): the
// [rows, bs] output block is summed in a local buffer over the column's blocks (by increasing
// block row), then stored. Tiles are fixed, so results do not depend on the thread count.
template <class T>
void forward_kernel(const T* x, const T* w, const T* gate, const T* bias, T* y, int64_t n, const BlockLayout& l) {
  const int64_t C = l.in_features(), K = l.out_features(), bs = l.block_size(), Q = l.block_cols();
  const int64_t tile = detail::kBsmmRowTile, tiles = (n + tile - 1) / tile;
  const auto &col_ptr = l.col_ptr(), &col_blocks = l.col_blocks(), &block_row = l.block_row();
  // Eigen multithreads a product of 1e5 multiply-adds or more unless it runs inside an active
  // OpenMP region (whose team it would fight): any call with that much work runs in one.
  const double work = static_cast<double>(n) * bs * bs * static_cast<double>(l.nnz());
#pragma omp parallel if (work > 5e4)
  {
    RowMat<T> acc(std::min(tile, n), bs);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tiles * Q; ++task) {
      const int64_t c = task % Q, n0 = (task / Q) * tile, rows = std::min(tile, n - n0);
      auto a = acc.topRows(rows);
      a.setZero();
      for (int32_t p = col_ptr[c]; p < col_ptr[c + 1]; ++p) {
        const int64_t k = col_blocks[p], r = block_row[k];
        StridedRowMap<T> xr(x + n0 * C + r * bs, rows, bs, Eigen::OuterStride<>(C));  // [rows, bs]
        ConstRowMap<T> wk(w + k * bs * bs, bs, bs);                      // [bs, bs]
        if (gate) {
          a.noalias() += gate[k] * xr * wk;
        } else {
          a.noalias() += xr * wk;
        }
      }
      if (bias) a.rowwise() += Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(bias + c * bs, bs);
      Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>>(y + n0 * K + c * bs, rows, bs, Eigen::OuterStride<>(K)) = a;
    }
  }
}

}  // namespace

std::vector<TensorMeta> op::Bsmm::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  detail::bsmm_check_layout(kName, attrs.layout);
  check_num_inputs(kName, in, 2 + (attrs.gated ? 1 : 0) + (attrs.biased ? 1 : 0));
  const BlockLayout& l = *attrs.layout;
  detail::bsmm_check_2d(kName, in[0], "x", l.in_features(), "in_features", l);
  detail::bsmm_check_weight(kName, in[1], in[0], l);
  if (attrs.gated) detail::bsmm_check_gate(kName, in[2], in[0], l);
  TS_CHECK(!attrs.f32_output || is_half(in[0].dtype), DTypeError,
           kName << ": an f32 output needs bf16 or f16 inputs, got x " << in[0]);
  const TensorMeta y{Shape({in[0].shape[0], l.out_features()}), attrs.f32_output ? DType::f32 : in[0].dtype,
                     in[0].device};
  if (attrs.biased) {
    const TensorMeta& b = in[attrs.gated ? 3 : 2];
    TS_CHECK(b.shape == Shape({l.out_features()}), ShapeError,
             kName << ": bias " << b << " must be [" << l.out_features() << "] (out_features of " << l.str() << ")");
    TS_CHECK(!attrs.f32_bias || (is_half(in[0].dtype) && !attrs.f32_output), DTypeError,
             kName << ": an f32 bias goes with bf16 or f16 inputs and output, got x " << in[0]
                   << (attrs.f32_output ? " with an f32 output" : ""));
    const DType bias_dtype = attrs.f32_bias ? DType::f32 : y.dtype;
    TS_CHECK(b.dtype == bias_dtype, DTypeError,
             kName << ": bias " << b << " must be " << dtype_name(bias_dtype)
                   << (attrs.f32_bias ? " (f32_bias)" : ", the output's dtype") << " (x " << in[0] << ")");
    TS_CHECK(b.device == y.device, DeviceError,
             kName << ": bias " << b << " and x " << in[0] << " are on different devices");
  }
  return {y};
}

void op::Bsmm::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward_kernel<T>(in[0].data<T>(), in[1].data<T>(), attrs.gated ? in[2].data<T>() : nullptr,
                      attrs.biased ? in[attrs.gated ? 3 : 2].data<T>() : nullptr, out[0].data<T>(), in[0].size(0),
                      *attrs.layout);
  });
}

std::vector<Tensor> op::Bsmm::backward(const BackwardContext& ctx, const Attrs& attrs) {
  // [N, K]; an f32 output of bf16/f16 inputs: the gradients are in the inputs' dtype (one cast of G)
  const int bias_at = attrs.gated ? 3 : 2;
  const bool need_db = attrs.biased && ctx.needs_input_grad(bias_at);
  Tensor g, db;
  if (attrs.f32_bias) {  // G in the operands' dtype already; db summed in f32
    g = ctx.grad_output();
    if (need_db) db = col_sum(g);
  } else if (attrs.f32_output && need_db) {
    std::vector<Tensor> both = cast_col_sum(ctx.grad_output(), ctx.input_meta(0).dtype);  // one pass over G
    g = both[0], db = both[1];
  } else {
    g = attrs.f32_output ? cast(ctx.grad_output(), ctx.input_meta(0).dtype) : ctx.grad_output();
    if (need_db) db = sum(ctx.grad_output(), 0);
  }
  const Tensor gate = attrs.gated ? ctx.input(2) : Tensor();
  Tensor dx;
  if (ctx.needs_input_grad(0)) dx = bsmm_dx(g, ctx.input(1), attrs.layout, gate);
  auto [dw, dgate] = detail::bsmm_weight_gate_grads(ctx.input(0), g, ctx.input(1), gate, attrs.layout, ctx);
  std::vector<Tensor> grads{dx, dw};
  if (attrs.gated) grads.push_back(dgate);
  if (attrs.biased) grads.push_back(db);
  return grads;
}

}  // namespace tessera
