#include "kernels/bsconv_dw/bsconv_dw.h"

#include <Eigen/Core>

#include <algorithm>

#include "core/autocast.h"
#include "kernels/bsconv/bsconv.h"
#include "kernels/common/conv_index.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/eigen_maps.h"
#include "kernels/ops.h"

namespace tessera {

Tensor bsconv_dw(const Tensor& x, const Tensor& dy, const LayoutPtr& layout, const ConvGeometry& g) {
  if (autocast::applies({&x, &dy}))
    return call<op::BsConvDw>({layout, g, true}, {autocast::operand(x), autocast::operand(dy)})[0];
  return call<op::BsConvDw>({layout, g, false}, {x, dy})[0];
}

namespace {

using cpu::RowMat;
using cpu::StridedRowMap;

// dw [nnz·taps, bs, bs]. One task per (block k, tap t): dw[k, t] = Σ over tiles of output rows
// (n, o), in order, of x_rows[rows, bs]ᵀ · dy[rows, c-block], x_rows gathered from in(o, t).
template <class T>
void weight_grad_kernel(const T* x, const T* dy, T* dw, int64_t n, const ConvIndex& ci, const BlockLayout& l) {
  const int64_t C = l.in_features(), K = l.out_features(), bs = l.block_size(), taps = ci.taps;
  const int64_t rows_total = n * ci.out_positions, tile = detail::kConvRowTile;
  const int64_t tasks = l.nnz() * taps;
  const auto &block_row = l.block_row(), &block_col = l.block_col();
  const std::vector<int64_t> rows_of = conv_row_table(ci, rows_total, /*from_output=*/true);
  const double work = static_cast<double>(rows_total) * bs * bs * static_cast<double>(tasks);
#pragma omp parallel if (work > 5e4)
  {
    RowMat<T> acc(bs, bs), x_rows(std::min(tile, std::max<int64_t>(rows_total, 1)), bs);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t k = task / taps, t = task % taps, r = block_row[k], c = block_col[k];
      acc.setZero();
      for (int64_t q0 = 0; q0 < rows_total; q0 += tile) {
        const int64_t rows = std::min(tile, rows_total - q0);
        auto buf = x_rows.topRows(rows);
        const int64_t* tap_rows = rows_of.data() + t * rows_total + q0;
        cpu::gather_rows(buf, x + r * bs, C, [&](int64_t q) { return tap_rows[q]; });
        StridedRowMap<T> g(dy + q0 * K + c * bs, rows, bs, Eigen::OuterStride<>(K));
        acc.noalias() += buf.transpose() * g;
      }
      Eigen::Map<RowMat<T>>(dw + task * bs * bs, bs, bs) = acc;
    }
  }
}

}  // namespace

std::vector<TensorMeta> op::BsConvDw::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  detail::bsconv_check_setup(kName, attrs.layout, attrs.geometry);
  check_num_inputs(kName, in, 2);
  const BlockLayout& l = *attrs.layout;
  const ConvGeometry& g = attrs.geometry;
  const std::vector<int64_t> sp = detail::bsconv_check_activation(kName, in[0], "x", l.in_features(), g);
  const std::vector<int64_t> out = g.out_spatial(sp, kName);
  check_same_dtype(kName, in[0], in[1]);
  const std::vector<int64_t> got = detail::bsconv_check_activation(kName, in[1], "dy", l.out_features(), g);
  TS_CHECK(got == out && in[1].shape[0] == in[0].shape[0], ShapeError,
           kName << ": dy " << in[1].shape << " must be the output of x " << in[0].shape << " under " << g.str());
  TS_CHECK(!attrs.f32_output || is_half(in[0].dtype), DTypeError,
           kName << ": an f32 output needs bf16 or f16 inputs, got x " << in[0]);
  return {TensorMeta{detail::bsconv_weight_shape(l, g), attrs.f32_output ? DType::f32 : in[0].dtype, in[0].device}};
}

void op::BsConvDw::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const ConvGeometry& g = attrs.geometry;
  const ConvIndex ci = conv_index(g, g.spatial_of(in[0].shape(), kName, "x"), kName);
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    weight_grad_kernel<T>(in[0].data<T>(), in[1].data<T>(), out[0].data<T>(), in[0].size(0), ci, *attrs.layout);
  });
}

std::vector<Tensor> op::BsConvDw::backward(const BackwardContext& ctx, const Attrs& attrs) {
  // H = d(dw) [nnz, kernel…, bs, bs], in the inputs' dtype
  const Tensor h = attrs.f32_output ? cast(ctx.grad_output(), ctx.input_meta(0).dtype) : ctx.grad_output();
  const ConvGeometry& g = attrs.geometry;
  Tensor dx, ddy;
  if (ctx.needs_input_grad(0))
    dx = call<op::BsConvDx>({attrs.layout, g, g.spatial_of(ctx.input_meta(0).shape, kName, "x"), false},
                            {ctx.input(1), h})[0];
  if (ctx.needs_input_grad(1)) ddy = call<op::BsConv>({attrs.layout, g, false}, {ctx.input(0), h})[0];
  return {dx, ddy};
}

}  // namespace tessera
