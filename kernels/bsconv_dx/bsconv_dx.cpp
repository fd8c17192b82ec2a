#include "kernels/bsconv_dx/bsconv_dx.h"

#include <Eigen/Core>

#include <algorithm>

#include "core/autocast.h"
#include "kernels/common/conv_index.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/eigen_maps.h"
#include "kernels/ops.h"

namespace tessera {

Tensor bsconv_dx(const Tensor& dy, const Tensor& w, const LayoutPtr& layout, const ConvGeometry& g,
                 const std::vector<int64_t>& in) {
  if (autocast::applies({&dy, &w}))
    return call<op::BsConvDx>({layout, g, in, true}, {autocast::operand(dy), autocast::operand(w)})[0];
  return call<op::BsConvDx>({layout, g, in, false}, {dy, w})[0];
}

namespace {

using cpu::ConstRowMap;
using cpu::RowMat;

// dx [N·Pin, C] from dy [N·P, K]. One task per (tile of input rows (n, i), block row r): the
// [rows, bs] block is summed over the row's blocks (increasing k) and, per block, the taps in
// order; the rows dy[n, o, c-block] with in(o, t) = i are gathered first (zeros where none).
template <class T>
void input_grad_kernel(const T* dy, const T* w, T* dx, int64_t n, const ConvIndex& ci, const BlockLayout& l) {
  const int64_t C = l.in_features(), K = l.out_features(), bs = l.block_size(), R = l.block_rows();
  const int64_t rows_total = n * ci.in_positions, tile = detail::kConvRowTile;
  const int64_t tiles = (rows_total + tile - 1) / tile, taps = ci.taps;
  const auto &row_ptr = l.row_ptr(), &block_col = l.block_col();
  const std::vector<int64_t> rows_of = conv_row_table(ci, rows_total, /*from_output=*/false);
  const double work = static_cast<double>(rows_total) * bs * bs * static_cast<double>(l.nnz() * taps);
#pragma omp parallel if (work > 5e4)
  {
    RowMat<T> acc(std::min(tile, rows_total), bs), g_rows(std::min(tile, rows_total), bs);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tiles * R; ++task) {
      const int64_t r = task % R, q0 = (task / R) * tile, rows = std::min(tile, rows_total - q0);
      auto acc_t = acc.topRows(rows);
      acc_t.setZero();
      for (int32_t k = row_ptr[r]; k < row_ptr[r + 1]; ++k) {
        const int64_t c = block_col[k];
        for (int64_t t = 0; t < taps; ++t) {
          auto buf = g_rows.topRows(rows);
          const int64_t* tap_rows = rows_of.data() + t * rows_total + q0;
          cpu::gather_rows(buf, dy + c * bs, K, [&](int64_t q) { return tap_rows[q]; });
          acc_t.noalias() += buf * ConstRowMap<T>(w + (k * taps + t) * bs * bs, bs, bs).transpose();
        }
      }
      Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>>(dx + q0 * C + r * bs, rows, bs, Eigen::OuterStride<>(C)) = acc_t;
    }
  }
}

}  // namespace

std::vector<TensorMeta> op::BsConvDx::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  detail::bsconv_check_setup(kName, attrs.layout, attrs.geometry);
  check_num_inputs(kName, in, 2);
  const BlockLayout& l = *attrs.layout;
  const ConvGeometry& g = attrs.geometry;
  TS_CHECK(static_cast<int>(attrs.in.size()) == g.dims, ValueError,
           kName << ": " << attrs.in.size() << " input sizes for a " << g.dims << "-D convolution");
  const std::vector<int64_t> out = g.out_spatial(attrs.in, kName);
  const std::vector<int64_t> got = detail::bsconv_check_activation(kName, in[0], "dy", l.out_features(), g);
  TS_CHECK(got == out, ShapeError,
           kName << ": dy " << in[0].shape << " must have the output sizes " << Shape(out) << " of " << g.str()
                 << " for inputs of size " << Shape(attrs.in));
  detail::bsconv_check_weight(kName, in[1], in[0], l, g);
  TS_CHECK(!attrs.f32_output || is_half(in[0].dtype), DTypeError,
           kName << ": an f32 output needs bf16 or f16 inputs, got dy " << in[0]);
  std::vector<int64_t> shape{in[0].shape[0]};
  shape.insert(shape.end(), attrs.in.begin(), attrs.in.end());
  shape.push_back(l.in_features());
  return {TensorMeta{Shape(shape), attrs.f32_output ? DType::f32 : in[0].dtype, in[0].device}};
}

void op::BsConvDx::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const ConvIndex ci = conv_index(attrs.geometry, attrs.in, kName);
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    input_grad_kernel<T>(in[0].data<T>(), in[1].data<T>(), out[0].data<T>(), in[0].size(0), ci, *attrs.layout);
  });
}

std::vector<Tensor> op::BsConvDx::backward(const BackwardContext& ctx, const Attrs& attrs) {
  const Tensor h = attrs.f32_output ? cast(ctx.grad_output(), ctx.input_meta(0).dtype) : ctx.grad_output();
  Tensor ddy, dw;
  if (ctx.needs_input_grad(0)) ddy = call<op::BsConv>({attrs.layout, attrs.geometry, false}, {h, ctx.input(1)})[0];
  if (ctx.needs_input_grad(1)) {
    const bool wide = is_half(h.dtype()) && ctx.input_grad_may_be_f32(1);
    dw = call<op::BsConvDw>({attrs.layout, attrs.geometry, wide}, {h, ctx.input(0)})[0];
  }
  return {ddy, dw};
}

}  // namespace tessera
