#include "kernels/where/where.h"

#include "kernels/common/binary.h"
#include "kernels/common/elementwise.h"
#include "kernels/ops.h"

namespace tessera {

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) { return call<op::Where>({}, {cond, a, b})[0]; }

std::vector<TensorMeta> op::Where::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  check_num_inputs(kName, in, 3);
  TS_CHECK(in[0].dtype == DType::u8, DTypeError, "where: cond must be u8, got " << in[0]);
  TS_CHECK(in[1].dtype == in[2].dtype, DTypeError, "where: dtypes of a and b differ: " << in[1] << " and " << in[2]);
  Shape out;
  try {
    out = broadcast_shapes(broadcast_shapes(in[0].shape, in[1].shape, kName), in[2].shape, kName);
  } catch (const ShapeError&) {
    TS_THROW(ShapeError, "where: cannot broadcast cond " << in[0] << ", a " << in[1] << " and b " << in[2]);
  }
  return {TensorMeta{out, in[1].dtype, in[1].device}};
}

namespace {

// out = c ? a : b, each operand read through its broadcast strides, one output row at a time.
template <class T>
void where_typed(const Tensor& c, const Tensor& a, const Tensor& b, const Tensor& out) {
  const uint8_t* pc = c.data<uint8_t>();
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  const Shape& os = out.shape();
  const int64_t inner = os.ndim() ? os[os.ndim() - 1] : 1;
  cpu::for_each_broadcast_row<3>(os, {c.shape(), a.shape(), b.shape()}, [&](int64_t r, const auto& o, const auto& st) {
    T* y = po + r * inner;
    for (int64_t j = 0; j < inner; ++j) y[j] = pc[o[0] + j * st[0]] ? pa[o[1] + j * st[1]] : pb[o[2] + j * st[2]];
  });
}

}  // namespace

void op::Where::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  dispatch_numeric(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    where_typed<T>(in[0], in[1], in[2], out[0]);
  });
}

std::vector<Tensor> op::Where::backward(const BackwardContext& ctx, const Attrs&) {
  const Tensor& g = ctx.grad_output();
  const Tensor& cond = ctx.input(0);
  Tensor da, db;
  if (ctx.needs_input_grad(1)) da = sum_to(masked_fill(g, eq(cond, 0.0), 0.0), ctx.input_meta(1).shape);
  if (ctx.needs_input_grad(2)) db = sum_to(masked_fill(g, cond, 0.0), ctx.input_meta(2).shape);
  return {Tensor(), da, db};
}

}  // namespace tessera
