#include "kernels/max/max.h"

#include <algorithm>
#include <cmath>

#include "kernels/common/dispatch.h"
#include "kernels/max_backward/max_backward.h"
#include "kernels/reshape/reshape.h"

namespace tessera {

Tensor max(const Tensor& x) {
  TS_CHECK(x.numel() > 0, ShapeError, "max: tensor " << x.meta() << " is empty");
  return max(reshape(x, std::vector<int64_t>{x.numel()}), 0, false);
}

Tensor max(const Tensor& x, int dim, bool keepdim) { return call<op::Max>({dim, keepdim}, {x})[0]; }

Tensor argmax(const Tensor& x, int dim, bool keepdim) {
  NoGradGuard no_grad;  // indices only: no node for the values output
  return call<op::Max>({dim, keepdim}, {x})[1];
}

Tensor argmax(const Tensor& x) {
  TS_CHECK(x.numel() > 0, ShapeError, "argmax: tensor " << x.meta() << " is empty");
  return argmax(reshape(x, std::vector<int64_t>{x.numel()}), 0, false);
}

namespace detail {

std::vector<TensorMeta> infer_extreme(const char* op, const std::vector<TensorMeta>& in, int dim, bool keepdim) {
  check_num_inputs(op, in, 1);
  check_floating(op, in[0]);
  const Shape& s = in[0].shape;
  const int nd = s.ndim();
  TS_CHECK(nd > 0, ShapeError, op << ": cannot reduce dim " << dim << " of a 0-d tensor " << in[0]);
  TS_CHECK(dim >= -nd && dim < nd, ShapeError, op << ": dim " << dim << " is out of range for " << in[0]);
  const int d = s.normalize_dim(dim);
  TS_CHECK(s[d] > 0, ShapeError, op << ": cannot reduce the empty dim " << dim << " of " << in[0]);
  std::vector<int64_t> dims = s.vec();
  if (keepdim) {
    dims[d] = 1;
  } else {
    dims.erase(dims.begin() + d);
  }
  return {TensorMeta{Shape(dims), in[0].dtype, in[0].device}, TensorMeta{Shape(dims), DType::i32, in[0].device}};
}

}  // namespace detail

namespace cpu {
namespace {

// Whether v replaces the current best. Strict comparison keeps the first of tied values;
// a NaN replaces any number and is never replaced, so the first NaN is reported.
template <class T, bool kMin>
inline bool better(T v, T best) {
  if (std::isnan(best)) return false;
  if (std::isnan(v)) return true;
  return kMin ? v < best : v > best;
}

template <class T, bool kMin>
void extreme_kernel(const T* x, T* y, int32_t* idx, int64_t outer, int64_t n, int64_t inner) {
  if (inner == 1) {
    // One contiguous row per output element.
#pragma omp parallel for if (outer * n > kParallelGrain)
    for (int64_t o = 0; o < outer; ++o) {
      const T* row = x + o * n;
      T best = row[0];
      int64_t bi = 0;
      for (int64_t k = 1; k < n; ++k)
        if (better<T, kMin>(row[k], best)) best = row[k], bi = k;
      y[o] = best;
      idx[o] = static_cast<int32_t>(bi);
    }
    return;
  }
  // Column blocks of [o, :, i0:i1]: walk k outermost so every read is a contiguous row piece.
  constexpr int64_t kCols = 512;
  const int64_t blocks = (inner + kCols - 1) / kCols;
#pragma omp parallel for if (outer * n * inner > kParallelGrain)
  for (int64_t task = 0; task < outer * blocks; ++task) {
    const int64_t o = task / blocks, i0 = (task % blocks) * kCols, i1 = std::min(inner, i0 + kCols);
    T* yo = y + o * inner;
    int32_t* io = idx + o * inner;
    const T* xo = x + o * n * inner;
    for (int64_t i = i0; i < i1; ++i) yo[i] = xo[i], io[i] = 0;
    for (int64_t k = 1; k < n; ++k) {
      const T* row = xo + k * inner;
      for (int64_t i = i0; i < i1; ++i)
        if (better<T, kMin>(row[i], yo[i])) yo[i] = row[i], io[i] = static_cast<int32_t>(k);
    }
  }
}

}  // namespace

void extreme_along_dim(const Tensor& x, const Tensor& values, const Tensor& indices, int dim, bool take_min) {
  const Shape& s = x.shape();
  const int d = s.normalize_dim(dim);
  const int64_t outer = s.prod(0, d), n = s[d], inner = s.prod(d + 1, s.ndim());
  if (outer * inner == 0) return;
  dispatch_float(values.dtype(), take_min ? "min" : "max", [&](auto tag) {
    using T = typename decltype(tag)::type;
    int32_t* idx = indices.data<int32_t>();
    if (take_min) {
      extreme_kernel<T, true>(x.data<T>(), values.data<T>(), idx, outer, n, inner);
    } else {
      extreme_kernel<T, false>(x.data<T>(), values.data<T>(), idx, outer, n, inner);
    }
  });
}

}  // namespace cpu

std::vector<TensorMeta> op::Max::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  return detail::infer_extreme(kName, in, attrs.dim, attrs.keepdim);
}

void op::Max::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  cpu::extreme_along_dim(in[0], out[0], out[1], attrs.dim, false);
}

std::vector<Tensor> op::Max::backward(const BackwardContext& ctx, const Attrs& attrs) {
  return {max_backward(ctx.grad_output(0), ctx.output(1), ctx.input_meta(0).shape, attrs.dim)};
}

}  // namespace tessera
