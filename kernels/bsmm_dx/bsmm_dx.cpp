#include "kernels/bsmm_dx/bsmm_dx.h"

#include <Eigen/Core>
#include <algorithm>

#include "kernels/common/dispatch.h"
#include "kernels/common/eigen_maps.h"
#include "kernels/ops.h"

namespace tessera {

Tensor bsmm_dx(const Tensor& dy, const Tensor& w, const LayoutPtr& layout, const Tensor& gate) {
  if (gate.defined()) return call<op::BsmmDx>({layout, true}, {dy, w, gate})[0];
  return call<op::BsmmDx>({layout, false}, {dy, w})[0];
}

std::vector<TensorMeta> op::BsmmDx::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  detail::bsmm_check_layout(kName, attrs.layout);
  check_num_inputs(kName, in, attrs.gated ? 3 : 2);
  const BlockLayout& l = *attrs.layout;
  detail::bsmm_check_2d(kName, in[0], "dy", l.out_features(), "out_features", l);
  detail::bsmm_check_weight(kName, in[1], in[0], l);
  if (attrs.gated) detail::bsmm_check_gate(kName, in[2], in[0], l);
  return {TensorMeta{Shape({in[0].shape[0], l.in_features()}), in[0].dtype, in[0].device}};
}

namespace {

using cpu::RowMat;
using cpu::ConstRowMap;
using cpu::StridedRowMap;

// dx [N, C] = dy [N, K] · Wᵀ over stored blocks. One task per (row tile, input block row r):
// the [rows, bs] block of dx sums gate[k]·dY_c·W[k]ᵀ over k in row r, in a local buffer.
template <class T>
void dx_kernel(const T* dy, const T* w, const T* gate, T* dx, int64_t n, const BlockLayout& l) {
  const int64_t C = l.in_features(), K = l.out_features(), bs = l.block_size(), R = l.block_rows();
  const int64_t tile = detail::kBsmmRowTile, tiles = (n + tile - 1) / tile;
  const auto &row_ptr = l.row_ptr(), &block_col = l.block_col();
  // Eigen multithreads a product of 1e5 multiply-adds or more unless it runs inside an active
  // OpenMP region (whose team it would fight): any call with that much work runs in one.
  const double work = static_cast<double>(n) * bs * bs * static_cast<double>(l.nnz());
#pragma omp parallel if (work > 5e4)
  {
    RowMat<T> acc(std::min(tile, n), bs);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tiles * R; ++task) {
      const int64_t r = task % R, n0 = (task / R) * tile, rows = std::min(tile, n - n0);
      auto a = acc.topRows(rows);
      a.setZero();
      for (int32_t k = row_ptr[r]; k < row_ptr[r + 1]; ++k) {
        const int64_t c = block_col[k];
        StridedRowMap<T> gc(dy + n0 * K + c * bs, rows, bs, Eigen::OuterStride<>(K));  // [rows, bs]
        ConstRowMap<T> wk(w + k * bs * bs, bs, bs);                       // [bs, bs]
        if (gate) {
          a.noalias() += gate[k] * gc * wk.transpose();
        } else {
          a.noalias() += gc * wk.transpose();
        }
      }
      Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>>(dx + n0 * C + r * bs, rows, bs, Eigen::OuterStride<>(C)) = a;
    }
  }
}

}  // namespace

void op::BsmmDx::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dx_kernel<T>(in[0].data<T>(), in[1].data<T>(), attrs.gated ? in[2].data<T>() : nullptr, out[0].data<T>(),
                 in[0].size(0), *attrs.layout);
  });
}

std::vector<Tensor> op::BsmmDx::backward(const BackwardContext& ctx, const Attrs& attrs) {
  const Tensor& g = ctx.grad_output();  // [N, C]
  const Tensor gate = attrs.gated ? ctx.input(2) : Tensor();
  Tensor ddy;
  if (ctx.needs_input_grad(0)) ddy = bsmm(g, ctx.input(1), attrs.layout, gate);
  auto [dw, dgate] = detail::bsmm_weight_gate_grads(g, ctx.input(0), ctx.input(1), gate, attrs.layout, ctx);
  if (attrs.gated) return {ddy, dw, dgate};
  return {ddy, dw};
}

}  // namespace tessera
