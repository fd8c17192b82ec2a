#include "kernels/sum/sum.h"

#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/expand/expand.h"
#include "kernels/mul_scalar/mul_scalar.h"
#include "kernels/reshape/reshape.h"

namespace tessera {

Tensor sum(const Tensor& x) { return sum(reshape(x, std::vector<int64_t>{x.numel()}), 0, false); }

Tensor sum(const Tensor& x, int dim, bool keepdim) { return call<op::Sum>({dim, keepdim}, {x})[0]; }

Tensor mean(const Tensor& x) {
  TS_CHECK(x.numel() > 0, ShapeError, "mean: tensor of shape " << x.shape() << " is empty");
  return mul(sum(x), 1.0 / static_cast<double>(x.numel()));
}

Tensor mean(const Tensor& x, int dim, bool keepdim) {
  const int64_t n = x.size(dim);
  TS_CHECK(n > 0, ShapeError, "mean: dim " << dim << " of shape " << x.shape() << " is empty");
  return mul(sum(x, dim, keepdim), 1.0 / static_cast<double>(n));
}

std::vector<TensorMeta> op::Sum::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1);
  check_floating(kName, in[0]);
  const Shape& s = in[0].shape;
  TS_CHECK(s.ndim() > 0, ShapeError, "sum: cannot reduce dim " << attrs.dim << " of a 0-d tensor");
  const int d = s.normalize_dim(attrs.dim);
  std::vector<int64_t> dims = s.vec();
  if (attrs.keepdim) {
    dims[d] = 1;
  } else {
    dims.erase(dims.begin() + d);
  }
  return {TensorMeta{Shape(dims), in[0].dtype, in[0].device}};
}

void op::Sum::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& s = in[0].shape();
  const int d = s.normalize_dim(attrs.dim);
  const int64_t outer = s.prod(0, d), n = s[d], inner = s.prod(d + 1, s.ndim());
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    // Accumulate in double: sums over long rows keep full f32 precision.
    if (inner == 1) {
#pragma omp parallel for if (outer * n > kParallelGrain)
      for (int64_t o = 0; o < outer; ++o) {
        double acc = 0;
        for (int64_t k = 0; k < n; ++k) acc += x[o * n + k];
        y[o] = static_cast<T>(acc);
      }
      return;
    }
#pragma omp parallel if (outer * n * inner > kParallelGrain)
    {
      std::vector<double> acc(static_cast<size_t>(inner));
#pragma omp for
      for (int64_t o = 0; o < outer; ++o) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t k = 0; k < n; ++k) {
          const T* row = x + (o * n + k) * inner;
          for (int64_t i = 0; i < inner; ++i) acc[i] += row[i];
        }
        for (int64_t i = 0; i < inner; ++i) y[o * inner + i] = static_cast<T>(acc[i]);
      }
    }
  });
}

std::vector<Tensor> op::Sum::backward(const BackwardContext& ctx, const Attrs& attrs) {
  const Shape& s = ctx.input_meta(0).shape;
  std::vector<int64_t> kept = s.vec();
  kept[s.normalize_dim(attrs.dim)] = 1;
  return {expand(reshape(ctx.grad_output(), kept), s)};
}

}  // namespace tessera
