#include "kernels/bsconv/bsconv.h"

#include <Eigen/Core>

#include <algorithm>

#include "core/autocast.h"
#include "kernels/common/conv_index.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/eigen_maps.h"
#include "kernels/ops.h"

namespace tessera {

Tensor bsconv(const Tensor& x, const Tensor& w, const LayoutPtr& layout, const ConvGeometry& g) {
  if (autocast::applies({&x, &w}))  // low-precision operands, f32 result written directly
    return call<op::BsConv>({layout, g, true}, {autocast::operand(x), autocast::operand(w)})[0];
  return call<op::BsConv>({layout, g, false}, {x, w})[0];
}

namespace detail {

void bsconv_check_setup(const char* op, const LayoutPtr& layout, const ConvGeometry& g) {
  TS_CHECK(layout != nullptr, ValueError, op << ": no block layout given");
  TS_CHECK(g.dims >= 1 && g.dims <= ConvGeometry::kMaxDims, ValueError,
           op << ": a convolution of " << g.dims << " spatial dimensions (1, 2 or 3; build it with conv_geometry)");
}

Shape bsconv_weight_shape(const BlockLayout& layout, const ConvGeometry& g) {
  std::vector<int64_t> s{layout.nnz()};
  for (int64_t k : g.kernel_shape()) s.push_back(k);
  s.push_back(layout.block_size());
  s.push_back(layout.block_size());
  return Shape(s);
}

void bsconv_check_weight(const char* op, const TensorMeta& w, const TensorMeta& a, const BlockLayout& layout,
                         const ConvGeometry& g) {
  check_same_dtype(op, a, w);
  const Shape want = bsconv_weight_shape(layout, g);
  TS_CHECK(w.shape == want, ShapeError,
           op << ": weight " << w.shape << " must be [nnz, kernel…, bs, bs] = " << want << " for " << layout.str()
              << " and " << g.str());
}

std::vector<int64_t> bsconv_check_activation(const char* op, const TensorMeta& a, const char* what,
                                             int64_t channels, const ConvGeometry& g) {
  check_floating(op, a, what);
  const std::vector<int64_t> s = g.spatial_of(a.shape, op, what);
  TS_CHECK(a.shape[a.shape.ndim() - 1] == channels, ShapeError,
           op << ": " << what << " " << a.shape << " must have " << channels << " channels (its last axis)");
  return s;
}

}  // namespace detail

namespace {

using cpu::ConstRowMap;
using cpu::RowMat;

// y [N·P, K] (P output positions per sample) = the convolution of x [N·Pin, C]. One task per
// (tile of output rows (n, o), output block column c): the [rows, bs] output block is summed in a
// local buffer over the column's blocks (increasing block row) and, per block, the taps in order;
// the rows x[n, in(o, t), r-block] of a (block, tap) are gathered first (zeros for padding).
template <class T>
void forward_kernel(const T* x, const T* w, T* y, int64_t n, const ConvIndex& ci, const BlockLayout& l) {
  const int64_t C = l.in_features(), K = l.out_features(), bs = l.block_size(), Q = l.block_cols();
  const int64_t rows_total = n * ci.out_positions, tile = detail::kConvRowTile;
  const int64_t tiles = (rows_total + tile - 1) / tile, taps = ci.taps;
  const auto &col_ptr = l.col_ptr(), &col_blocks = l.col_blocks(), &block_row = l.block_row();
  const std::vector<int64_t> rows_of = conv_row_table(ci, rows_total, /*from_output=*/true);
  const double work = static_cast<double>(rows_total) * bs * bs * static_cast<double>(l.nnz() * taps);
#pragma omp parallel if (work > 5e4)
  {
    RowMat<T> acc(std::min(tile, rows_total), bs), a_rows(std::min(tile, rows_total), bs);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tiles * Q; ++task) {
      const int64_t c = task % Q, q0 = (task / Q) * tile, rows = std::min(tile, rows_total - q0);
      auto acc_t = acc.topRows(rows);
      acc_t.setZero();
      for (int32_t p = col_ptr[c]; p < col_ptr[c + 1]; ++p) {
        const int64_t k = col_blocks[p], r = block_row[k];
        for (int64_t t = 0; t < taps; ++t) {
          auto buf = a_rows.topRows(rows);
          const int64_t* tap_rows = rows_of.data() + t * rows_total + q0;
          cpu::gather_rows(buf, x + r * bs, C, [&](int64_t q) { return tap_rows[q]; });
          acc_t.noalias() += buf * ConstRowMap<T>(w + (k * taps + t) * bs * bs, bs, bs);
        }
      }
      Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>>(y + q0 * K + c * bs, rows, bs, Eigen::OuterStride<>(K)) = acc_t;
    }
  }
}

}  // namespace

std::vector<TensorMeta> op::BsConv::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  detail::bsconv_check_setup(kName, attrs.layout, attrs.geometry);
  check_num_inputs(kName, in, 2);
  const BlockLayout& l = *attrs.layout;
  detail::bsconv_check_activation(kName, in[0], "x", l.in_features(), attrs.geometry);
  detail::bsconv_check_weight(kName, in[1], in[0], l, attrs.geometry);
  TS_CHECK(!attrs.f32_output || is_half(in[0].dtype), DTypeError,
           kName << ": an f32 output needs bf16 or f16 inputs, got x " << in[0]);
  return {TensorMeta{attrs.geometry.output_shape(in[0].shape, l.out_features(), kName),
                     attrs.f32_output ? DType::f32 : in[0].dtype, in[0].device}};
}

void op::BsConv::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const ConvGeometry& g = attrs.geometry;
  const ConvIndex ci = conv_index(g, g.spatial_of(in[0].shape(), kName, "x"), kName);
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward_kernel<T>(in[0].data<T>(), in[1].data<T>(), out[0].data<T>(), in[0].size(0), ci, *attrs.layout);
  });
}

std::vector<Tensor> op::BsConv::backward(const BackwardContext& ctx, const Attrs& attrs) {
  // an f32 output of bf16/f16 inputs: the gradients are in the inputs' dtype (one cast of G)
  const Tensor g = attrs.f32_output ? cast(ctx.grad_output(), ctx.input_meta(0).dtype) : ctx.grad_output();
  const ConvGeometry& geo = attrs.geometry;
  Tensor dx, dw;
  if (ctx.needs_input_grad(0))
    dx = call<op::BsConvDx>({attrs.layout, geo, geo.spatial_of(ctx.input_meta(0).shape, kName, "x"), false},
                            {g, ctx.input(1)})[0];
  if (ctx.needs_input_grad(1)) {
    // under autocast (w a cast of an f32 parameter) dW comes back in f32, unrounded
    const bool wide = is_half(g.dtype()) && ctx.input_grad_may_be_f32(1);
    dw = call<op::BsConvDw>({attrs.layout, geo, wide}, {ctx.input(0), g})[0];
  }
  return {dx, dw};
}

}  // namespace tessera
