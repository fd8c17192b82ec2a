#include "kernels/bsmm_dw/bsmm_dw.h"

#include <Eigen/Core>
#include <algorithm>

#include "kernels/common/dispatch.h"
#include "kernels/common/eigen_maps.h"
#include "kernels/ops.h"

namespace tessera {

Tensor bsmm_dw(const Tensor& x, const Tensor& dy, const LayoutPtr& layout) {
  return call<op::BsmmDw>({layout}, {x, dy})[0];
}

Tensor bsmm_dw(const Tensor& x, const Tensor& dy, const LayoutPtr& layout, const Tensor& acc, bool f32_output) {
  if (acc.defined()) return call<op::BsmmDw>({layout, f32_output, true}, {x, dy, acc})[0];
  return call<op::BsmmDw>({layout, f32_output, false}, {x, dy})[0];
}

std::vector<TensorMeta> op::BsmmDw::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  detail::bsmm_check_layout(kName, attrs.layout);
  check_num_inputs(kName, in, attrs.accumulate ? 3 : 2);
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
  if (attrs.accumulate)
    TS_CHECK(in[2].shape == out.shape && in[2].dtype == out.dtype && in[2].device == out.device, ShapeError,
             kName << ": the accumulated gradient " << in[2] << " must be " << out << " (other inputs " << in[0]
                   << ", " << in[1] << ")");
  return {out};
}

namespace {

using cpu::RowMap;
using cpu::StridedRowMap;

// dw[k] [bs, bs] = X_r [N, bs]ᵀ · dY_c [N, bs], each block owned by one thread. The sum over N
// runs in chunks of kChunk rows, every block of a chunk before the next chunk: the chunk's rows
// of X and dY stay in cache across the blocks that read them (1.2-1.3x faster than one full-depth
// product per block, which streams X_r and dY_c from memory for each block anew).
template <class T>
void dw_kernel(const T* x, const T* dy, T* dw, int64_t n, const BlockLayout& l) {
  constexpr int64_t kChunk = 64;
  const int64_t C = l.in_features(), K = l.out_features(), bs = l.block_size(), nnz = l.nnz();
  const auto &block_row = l.block_row(), &block_col = l.block_col();
  if (n == 0) {
    std::fill(dw, dw + nnz * bs * bs, T(0));
    return;
  }
  // Eigen multithreads a product of 1e5 multiply-adds or more unless it runs inside an active
  // OpenMP region (whose team it would fight): any call with that much work runs in one.
  const double work = static_cast<double>(n) * bs * bs * static_cast<double>(nnz);
#pragma omp parallel if (work > 5e4)
  for (int64_t n0 = 0; n0 < n; n0 += kChunk) {
    const int64_t rows = std::min(kChunk, n - n0);
    // Static schedule, same trip count: every chunk gives a thread the same blocks, so no barrier.
#pragma omp for schedule(static) nowait
    for (int64_t k = 0; k < nnz; ++k) {
      RowMap<T> out(dw + k * bs * bs, bs, bs);
      StridedRowMap<T> xr(x + n0 * C + block_row[k] * bs, rows, bs, Eigen::OuterStride<>(C));   // [rows, bs]
      StridedRowMap<T> gc(dy + n0 * K + block_col[k] * bs, rows, bs, Eigen::OuterStride<>(K));  // [rows, bs]
      if (n0 == 0) {
        out.noalias() = xr.transpose() * gc;
      } else {
        out.noalias() += xr.transpose() * gc;
      }
    }
  }
}

}  // namespace

void op::BsmmDw::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dw = out[0].data<T>();
    dw_kernel<T>(in[0].data<T>(), in[1].data<T>(), dw, in[0].size(0), *attrs.layout);
    if (!attrs.accumulate) return;
    const T* acc = in[2].data<T>();
    const int64_t total = out[0].numel();
#pragma omp parallel for if (total > (1 << 16))
    for (int64_t i = 0; i < total; ++i) dw[i] = acc[i] + dw[i];
  });
}

std::vector<Tensor> op::BsmmDw::backward(const BackwardContext& ctx, const Attrs& attrs) {
  // [nnz, bs, bs]; an f32 output of bf16/f16 inputs: x and dy get gradients in their dtype
  const Tensor& g = ctx.grad_output();
  const Tensor gx = attrs.f32_output ? cast(g, ctx.input_meta(0).dtype) : g;
  std::vector<Tensor> grads{ctx.needs_input_grad(0) ? bsmm_dx(ctx.input(1), gx, attrs.layout) : Tensor(),
                            ctx.needs_input_grad(1) ? bsmm(ctx.input(0), gx, attrs.layout) : Tensor()};
  if (attrs.accumulate) grads.push_back(ctx.needs_input_grad(2) ? g : Tensor());
  return grads;
}

}  // namespace tessera
