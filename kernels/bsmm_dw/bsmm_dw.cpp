#include "kernels/bsmm_dw/bsmm_dw.h"

#include "kernels/common/bsmm_dw_cpu.h"
#include "kernels/common/dispatch.h"
#include "kernels/ops.h"

namespace tessera {

Tensor bsmm_dw(const Tensor& x, const Tensor& dy, const LayoutPtr& layout) {
  return call<op::BsmmDw>({layout}, {x, dy})[0];
}

Tensor bsmm_dw(const Tensor& x, const Tensor& dy, const LayoutPtr& layout, const Tensor& acc, bool f32_output) {
  if (acc.defined()) return call<op::BsmmDw>({layout, f32_output, true}, {x, dy, acc})[0];
  return call<op::BsmmDw>({layout, f32_output, false}, {x, dy})[0];
}

std::pair<Tensor, Tensor> bsmm_dw_gated(const Tensor& x, const Tensor& dy, const Tensor& w, const Tensor& gate,
                                        const LayoutPtr& layout, bool f32_output) {
  std::vector<Tensor> out = call<op::BsmmDw>({layout, f32_output, false, true}, {x, dy, w, gate});
  return {out[0], out[1]};
}

std::vector<TensorMeta> op::BsmmDw::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  detail::bsmm_check_layout(kName, attrs.layout);
  check_num_inputs(kName, in, 2 + (attrs.gated ? 2 : 0) + (attrs.accumulate ? 1 : 0));
  const BlockLayout& l = *attrs.layout;
  detail::bsmm_check_2d(kName, in[0], "x", l.in_features(), "in_features", l);
  detail::bsmm_check_2d(kName, in[1], "dy", l.out_features(), "out_features", l);
  check_same_dtype(kName, in[0], in[1]);
  TS_CHECK(in[0].shape[0] == in[1].shape[0], ShapeError,
           kName << ": x " << in[0].shape << " and dy " << in[1].shape << " have different row counts");
  TS_CHECK(!attrs.f32_output || is_half(in[0].dtype), DTypeError,
           kName << ": an f32 output needs bf16 or f16 inputs, got x " << in[0]);
  const int64_t bs = l.block_size();
  const TensorMeta out{Shape({l.nnz(), bs, bs}), attrs.f32_output ? DType::f32 : in[0].dtype, in[0].device};
  if (attrs.gated) {
    detail::bsmm_check_weight(kName, in[2], in[0], l);
    detail::bsmm_check_gate(kName, in[3], in[0], l);
  }
  if (attrs.accumulate) {
    const TensorMeta& acc = in[attrs.gated ? 4 : 2];
    TS_CHECK(acc.shape == out.shape && acc.dtype == out.dtype && acc.device == out.device, ShapeError,
             kName << ": the accumulated gradient " << acc << " must be " << out << " (other inputs " << in[0]
                   << ", " << in[1] << ")");
  }
  if (attrs.gated) return {out, TensorMeta{Shape({l.nnz()}), out.dtype, out.device}};
  return {out};
}

// The gate epilogue on the P blocks in dw: dgate[k] = sum_ij P[k]_ij·w[k]_ij (in increasing
// element order), then dw[k] = gate[k]·P[k].
template <class T>
void gate_epilogue(T* dw, T* dgate, const T* w, const T* gate, int64_t nnz, int64_t bs) {
  const int64_t elems = bs * bs;
#pragma omp parallel for if (nnz * elems > (1 << 16))
  for (int64_t k = 0; k < nnz; ++k) {
    T* p = dw + k * elems;
    const T* wk = w + k * elems;
    T s = 0;
    for (int64_t e = 0; e < elems; ++e) s += p[e] * wk[e];
    dgate[k] = s;
    for (int64_t e = 0; e < elems; ++e) p[e] = gate[k] * p[e];
  }
}

void op::BsmmDw::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dw = out[0].data<T>();
    const BlockLayout& l = *attrs.layout;
    cpu::block_weight_gradient<T>(in[0].data<T>(), in[1].data<T>(), dw, in[0].size(0), l);
    if (attrs.gated)
      gate_epilogue<T>(dw, out[1].data<T>(), in[2].data<T>(), in[3].data<T>(), l.nnz(), l.block_size());
    if (!attrs.accumulate) return;
    const T* acc = in[attrs.gated ? 4 : 2].data<T>();
    const int64_t total = out[0].numel();
#pragma omp parallel for if (total > (1 << 16))
    for (int64_t i = 0; i < total; ++i) dw[i] = acc[i] + dw[i];
  });
}

std::vector<Tensor> op::BsmmDw::backward(const BackwardContext& ctx, const Attrs& attrs) {
  // [nnz, bs, bs]; an f32 output of bf16/f16 inputs: the inputs get gradients in their dtype
  const DType dt = ctx.input_meta(0).dtype;
  const Tensor& g = ctx.grad_output();
  const Tensor gx = attrs.f32_output ? cast(g, dt) : g;
  if (!attrs.gated) {
    std::vector<Tensor> grads{ctx.needs_input_grad(0) ? bsmm_dx(ctx.input(1), gx, attrs.layout) : Tensor(),
                              ctx.needs_input_grad(1) ? bsmm(ctx.input(0), gx, attrs.layout) : Tensor()};
    if (attrs.accumulate) grads.push_back(ctx.needs_input_grad(2) ? g : Tensor());
    return grads;
  }
  const Tensor &x = ctx.input(0), &dy = ctx.input(1), &w = ctx.input(2), &gate = ctx.input(3);
  const int64_t nnz = attrs.layout->nnz(), bs = attrs.layout->block_size();
  const Tensor h = attrs.f32_output ? cast(ctx.grad_output(1), dt) : ctx.grad_output(1);  // [nnz]
  auto per_block = [&](const Tensor& v) { return reshape(v, {nnz, 1, 1}); };
  std::vector<Tensor> grads(4);
  if (ctx.needs_input_grad(0) || ctx.needs_input_grad(1)) {
    const Tensor q = add(mul(gx, per_block(gate)), mul(w, per_block(h)));  // d(P) [nnz, bs, bs]
    if (ctx.needs_input_grad(0)) grads[0] = bsmm_dx(dy, q, attrs.layout);
    if (ctx.needs_input_grad(1)) grads[1] = bsmm(x, q, attrs.layout);
  }
  if (ctx.needs_input_grad(2) || ctx.needs_input_grad(3)) {
    const Tensor p = bsmm_dw(x, dy, attrs.layout);
    if (ctx.needs_input_grad(2)) grads[2] = mul(p, per_block(h));
    if (ctx.needs_input_grad(3)) grads[3] = sum(reshape(mul(p, gx), {nnz, bs * bs}), 1);
  }
  if (attrs.accumulate) grads.push_back(ctx.needs_input_grad(4) ? g : Tensor());
  return grads;
}

}  // namespace tessera
