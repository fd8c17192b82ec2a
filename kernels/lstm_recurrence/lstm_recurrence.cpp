#include "kernels/lstm_recurrence/lstm_recurrence.h"

#include <cmath>
#include <tuple>

#include "core/autocast.h"
#include "kernels/add/add.h"
#include "kernels/bsmm_dw/bsmm_dw.h"
#include "kernels/bsmm_dw_pair/bsmm_dw_pair.h"
#include "kernels/cast/cast.h"
#include "kernels/col_sum/col_sum.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/lstm_cell_cpu.h"
#include "kernels/lstm_recurrence/recurrent_product.h"
#include "kernels/lstm_recurrence_backward/lstm_recurrence_backward.h"
#include "kernels/matmul/matmul.h"
#include "kernels/reshape/reshape.h"
#include "kernels/slice/slice.h"
#include "kernels/sum/sum.h"

namespace tessera {

std::tuple<Tensor, Tensor, Tensor> lstm_recurrence(const Tensor& gx, const Tensor& h0, const Tensor& c0,
                                                   const Tensor& wh, const LayoutPtr& layout, double forget_bias,
                                                   const Tensor& bias, const Tensor& x, const Tensor& wx,
                                                   const LayoutPtr& x_layout) {
  TS_CHECK(x.defined() == wx.defined() && x.defined() == (x_layout != nullptr), ValueError,
           "lstm_recurrence: x, wx and x_layout come together (W_x's gradient from the backward) or not at all");
  const op::LstmRecurrence::Attrs attrs{layout, forget_bias, x_layout};
  auto inputs = [&](auto&& f) {
    std::vector<Tensor> in{f(gx), f(h0), f(c0), f(wh)};
    if (bias.defined()) in.push_back(f(bias));
    if (x_layout) in.insert(in.end(), {f(x), f(wx)});
    return in;
  };
  if (autocast::applies({&gx, &h0, &c0, &wh, &bias, &x, &wx})) {
    // autocast: the recurrence in the low-precision dtype (f32 math and f32 cells inside), its
    // outputs back in f32 as every autocast op's are
    std::vector<Tensor> out =
        call<op::LstmRecurrence>(attrs, inputs([](const Tensor& t) { return autocast::operand(t); }));
    return {cast(out[0], DType::f32), cast(out[1], DType::f32), cast(out[2], DType::f32)};
  }
  std::vector<Tensor> out = call<op::LstmRecurrence>(attrs, inputs([](const Tensor& t) { return t; }));
  return {out[0], out[1], out[2]};
}

bool lstm_recurrence_fused(const TensorMeta& gx, int64_t hidden, const LayoutPtr& layout) {
  return gx.device.is_cuda() && detail::recurrence_unfused_reason(gx, hidden, layout).empty();
}

namespace detail {

RecurrenceDims check_recurrence_inputs(const char* op, const TensorMeta& gx, const TensorMeta& h0,
                                       const TensorMeta& c0, const TensorMeta& wh, const LayoutPtr& layout,
                                       const TensorMeta* bias) {
  check_floating(op, gx, "gx");
  TS_CHECK(h0.shape.ndim() == 2 && h0.shape[1] >= 1 && h0.shape[0] >= 1, ShapeError,
           op << ": h0 must be [B, H], got " << h0);
  const int64_t b = h0.shape[0], hs = h0.shape[1];
  TS_CHECK(gx.shape.ndim() == 3 && gx.shape[0] >= 1 && gx.shape[1] == b && gx.shape[2] == 4 * hs, ShapeError,
           op << ": gx " << gx << " must be [T, " << b << ", " << 4 * hs << "] (gates i, f, o, u) for h0 " << h0);
  TS_CHECK(c0.shape == h0.shape, ShapeError, op << ": c0 " << c0 << " must be shaped like h0 " << h0);
  if (layout) {
    TS_CHECK(layout->in_features() == hs && layout->out_features() == 4 * hs, ShapeError,
             op << ": layout " << layout->str() << " must be [" << hs << ", " << 4 * hs << "] for h0 " << h0);
    const int64_t bs = layout->block_size();
    TS_CHECK(wh.shape == Shape({layout->nnz(), bs, bs}), ShapeError,
             op << ": wh " << wh << " must be [" << layout->nnz() << ", " << bs << ", " << bs << "] for layout "
                << layout->str());
  } else {
    TS_CHECK(wh.shape == Shape({hs, 4 * hs}), ShapeError,
             op << ": wh " << wh << " must be [" << hs << ", " << 4 * hs << "] (dense; or pass its layout)");
  }
  if (bias)
    TS_CHECK(bias->shape == Shape({4 * hs}), ShapeError,
             op << ": bias " << *bias << " must be [" << 4 * hs << "] (one per gate column) for h0 " << h0);
  const TensorMeta* same[] = {&h0, &c0, &wh, bias};
  const char* names[] = {"h0", "c0", "wh", "bias"};
  for (int i = 0; i < (bias ? 4 : 3); ++i) {
    TS_CHECK(same[i]->dtype == gx.dtype, DTypeError,
             op << ": " << names[i] << " " << *same[i] << " and gx " << gx << " differ in dtype");
    TS_CHECK(same[i]->device == gx.device, DeviceError,
             op << ": " << names[i] << " " << *same[i] << " and gx " << gx << " are on different devices");
  }
  return {gx.shape[0], b, hs};
}

#ifndef TESSERA_WITH_CUDA
std::string recurrence_unfused_reason(const TensorMeta&, int64_t, const LayoutPtr&) {
  return "tessera was built without CUDA";
}
#endif

}  // namespace detail

std::vector<TensorMeta> op::LstmRecurrence::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  const size_t extra = attrs.x_layout ? 2 : 0;
  TS_CHECK(in.size() == 4 + extra || in.size() == 5 + extra, ValueError,
           kName << ": expected " << 4 + extra << " inputs (gx, h0, c0, wh" << (extra ? ", x, wx" : "") << ") or "
                 << 5 + extra << " (and bias), got " << in.size());
  const bool biased = has_bias(in.size(), attrs);
  const detail::RecurrenceDims d = detail::check_recurrence_inputs(kName, in[0], in[1], in[2], in[3], attrs.layout,
                                                                   biased ? &in[4] : nullptr);
  if (attrs.x_layout) {  // x [T·B, C] and wx, the input projection's operands
    const TensorMeta &x = in[biased ? 5 : 4], &wx = in[biased ? 6 : 5];
    const BlockLayout& l = *attrs.x_layout;
    const int64_t bs = l.block_size();
    TS_CHECK(l.out_features() == 4 * d.hidden && x.shape == Shape({d.steps * d.batch, l.in_features()}) &&
                 wx.shape == Shape({l.nnz(), bs, bs}),
             ShapeError,
             kName << ": x " << x << " and wx " << wx << " must be [" << d.steps * d.batch << ", "
                   << l.in_features() << "] and [" << l.nnz() << ", " << bs << ", " << bs << "] for x_layout "
                   << l.str() << " and gx " << in[0]);
    TS_CHECK(x.dtype == in[0].dtype && wx.dtype == in[0].dtype, DTypeError,
             kName << ": x " << x << " and wx " << wx << " must have gx's dtype (" << in[0] << ")");
  }
  TS_CHECK(std::isfinite(attrs.forget_bias), ValueError, kName << ": forget_bias must be finite, got " << attrs.forget_bias);
  const TensorMeta& gx = in[0];
  const DType ct = detail::recurrence_compute_dtype(gx.dtype);
  const TensorMeta y{Shape({d.steps, d.batch, d.hidden}), gx.dtype, gx.device};
  const TensorMeta gates{gx.shape, ct, gx.device};
  const TensorMeta cells{y.shape, ct, gx.device};
  return {y, in[1], in[1], gates, cells};
}

namespace {

template <class T>
void recurrence_forward_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                            const op::LstmRecurrence::Attrs& attrs) {
  const int64_t ts = in[0].size(0), b = in[0].size(1), hs = in[1].size(1), g4 = 4 * hs;
  const T* gx = in[0].data<T>();                  // [T, B, 4H]
  const T* w = in[3].data<T>();                   // [H, 4H] or [nnz, bs, bs]
  const T* bias = op::LstmRecurrence::has_bias(in.size(), attrs) ? in[4].data<T>() : nullptr;  // [4H] or none
  T* y = out[0].data<T>();                        // [T, B, H]
  T* gates = out[3].data<T>();                    // [T, B, 4H]: pre, then activated in place
  T* cells = out[4].data<T>();                    // [T, B, H]
  const T fb = static_cast<T>(attrs.forget_bias);
  for (int64_t t = 0; t < ts; ++t) {
    const T* h_prev = t == 0 ? in[1].data<T>() : y + (t - 1) * b * hs;  // [B, H]
    const T* c_prev = t == 0 ? in[2].data<T>() : cells + (t - 1) * b * hs;
    T* g = gates + t * b * g4;
    std::copy(gx + t * b * g4, gx + (t + 1) * b * g4, g);
    if (bias)
      for (int64_t r = 0; r < b; ++r)
        for (int64_t j = 0; j < g4; ++j) g[r * g4 + j] += bias[j];
    cpu::recurrent_product(h_prev, w, attrs.layout.get(), b, hs, g4, /*transposed=*/false, g);  // += h·W_h
    cpu::lstm_cell_forward(g, c_prev, cells + t * b * hs, y + t * b * hs, b, hs, fb);
  }
  std::copy(y + (ts - 1) * b * hs, y + ts * b * hs, out[1].data<T>());          // hT
  std::copy(cells + (ts - 1) * b * hs, cells + ts * b * hs, out[2].data<T>());  // cT
}

}  // namespace

void op::LstmRecurrence::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    recurrence_forward_cpu<T>(in, out, attrs);
  });
}

namespace {

/// db [4H] = Σ over all T·B rows of dpre [T, B, 4H], in the bias's dtype. On the GPU col_sum's
/// kernel (one read of dpre, four columns a thread, in f32), rounded once to the bias's dtype;
/// on the CPU sum, as before (the CPU's bits unchanged).
Tensor bias_gradient(const Tensor& dpre, const TensorMeta& bias) {
  const Tensor g = reshape(dpre, {dpre.size(0) * dpre.size(1), dpre.size(2)});
  if (!g.device().is_cuda()) return sum(g, 0);
  const Tensor s = col_sum(g);
  return s.dtype() == bias.dtype ? s : cast(s, bias.dtype);
}

}  // namespace

std::vector<Tensor> op::LstmRecurrence::backward(const BackwardContext& ctx, const Attrs& attrs) {
  const Tensor& h0 = ctx.input(1);
  const Tensor& wh = ctx.input(3);
  const Tensor& y = ctx.output(0);
  // Output gradients that never arrived (hT, cT unused) read as zeros.
  std::vector<Tensor> d = lstm_recurrence_backward(ctx.grad_output(0), ctx.grad_output(1), ctx.grad_output(2),
                                                   ctx.output(3), ctx.output(4), ctx.input(2), wh, attrs.layout);
  const Tensor& dpre = d[0];  // [T, B, 4H]
  const bool biased = has_bias(ctx.num_inputs(), attrs);
  const int wx_at = biased ? 6 : 5;
  const Tensor x = attrs.x_layout ? ctx.input(wx_at - 1) : Tensor();
  // both weight gradients in one bsmm_dw_pair where both are wanted over T > 1 steps; W_x's in f32
  // where its operand is a cast of an f32 tensor (autocast), as bsmm's backward gives it
  const bool pair = attrs.x_layout && attrs.layout && ctx.needs_input_grad(wx_at) && y.size(0) > 1;
  const bool wide_x = attrs.x_layout && is_half(dpre.dtype()) && ctx.input_grad_may_be_f32(wx_at);
  // on the GPU the bias gradient comes with the pair (dpre read once for all three: bsmm_dw_pair's
  // column sums, in its kernel where TESSERA_BSMM_DW_PAIR_SUMS allows, else col_sum's after it); on
  // the CPU from sum as before (its bits unchanged)
  const bool db_from_pair = pair && biased && ctx.needs_input_grad(4) && dpre.device().is_cuda();
  Tensor dwh, dwx, db;
  if (ctx.needs_input_grad(3)) {
    // dW_h = Σ_t h_{t−1}ᵀ·dpre_t = [y_0 … y_{T−2}]ᵀ·dpre[B:] + h0ᵀ·dpre[:B] over all rows at once,
    // y's rows read in place (no copy of [h0; y_0 … y_{T−2}] [T·B, H])
    const int64_t ts = y.size(0), b = y.size(1), hs = y.size(2);
    const Tensor g = reshape(dpre, {ts * b, 4 * hs});
    const Tensor g0 = ts > 1 ? slice(g, 0, 0, b) : g;
    if (ts == 1) {
      dwh = attrs.layout ? bsmm_dw(h0, g0, attrs.layout) : matmul(h0, g0, /*trans_a=*/true);
    } else {
      const Tensor y_prev = reshape(slice(y, 0, 0, ts - 1), {(ts - 1) * b, hs});
      Tensor rest;  // Σ_{t ≥ 1} h_{t−1}ᵀ·dpre_t
      if (pair) {   // with dW_x = xᵀ·dpre, reading dpre once
        if (db_from_pair) {
          Tensor s;
          std::tie(dwx, rest, s) = bsmm_dw_pair_and_column_sums(x, y_prev, g, attrs.x_layout, attrs.layout, b, wide_x);
          db = s.dtype() == ctx.input_meta(4).dtype ? s : cast(s, ctx.input_meta(4).dtype);
        } else {
          std::tie(dwx, rest) = bsmm_dw_pair(x, y_prev, g, attrs.x_layout, attrs.layout, b, wide_x);
        }
        if (wide_x) rest = cast(rest, y.dtype());  // the f32 sums rounded once, as bsmm_dw rounds them
      } else if (attrs.layout) {
        rest = bsmm_dw(y_prev, slice(g, 0, b, ts * b), attrs.layout);
      }
      dwh = attrs.layout ? bsmm_dw(h0, g0, attrs.layout, rest, /*f32_output=*/false)
                         : add(matmul(y_prev, slice(g, 0, b, ts * b), /*trans_a=*/true),
                               matmul(h0, g0, /*trans_a=*/true));
    }
  }
  if (attrs.x_layout && ctx.needs_input_grad(wx_at) && !dwx.defined())
    dwx = bsmm_dw(x, reshape(dpre, {x.size(0), dpre.size(2)}), attrs.x_layout, Tensor(), wide_x);
  std::vector<Tensor> grads{ctx.needs_input_grad(0) ? dpre : Tensor(), ctx.needs_input_grad(1) ? d[1] : Tensor(),
                            ctx.needs_input_grad(2) ? d[2] : Tensor(), dwh};
  if (biased && ctx.needs_input_grad(4) && !db.defined()) db = bias_gradient(dpre, ctx.input_meta(4));
  if (biased) grads.push_back(db);
  if (attrs.x_layout) grads.insert(grads.end(), {Tensor(), dwx});  // x's comes from bsmm's backward
  return grads;
}

}  // namespace tessera
