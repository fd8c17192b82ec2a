#include "kernels/max_backward/max_backward.h"

#include <cstring>

#include "kernels/common/dispatch.h"

namespace tessera {

Tensor max_backward(const Tensor& g, const Tensor& indices, const Shape& shape, int dim) {
  return call<op::MaxBackward>({shape, dim}, {g, indices})[0];
}

std::vector<TensorMeta> op::MaxBackward::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 2);
  check_floating(kName, in[0], "gradient");
  TS_CHECK(in[1].dtype == DType::i32, DTypeError, "max_backward: indices must be i32, got " << in[1]);
  const Shape& s = attrs.shape;
  const int nd = s.ndim();
  TS_CHECK(attrs.dim >= -nd && attrs.dim < nd, ShapeError,
           "max_backward: dim " << attrs.dim << " is out of range for input shape " << s);
  const int d = s.normalize_dim(attrs.dim);
  std::vector<int64_t> kept = s.vec(), dropped = s.vec();
  kept[d] = 1;
  dropped.erase(dropped.begin() + d);
  const Shape& gs = in[0].shape;
  TS_CHECK(gs == Shape(kept) || gs == Shape(dropped), ShapeError,
           "max_backward: gradient " << in[0] << " does not fit input shape " << s << " reduced over dim "
                                     << attrs.dim);
  TS_CHECK(in[1].shape == gs, ShapeError,
           "max_backward: indices " << in[1] << " and gradient " << in[0] << " differ in shape");
  return {TensorMeta{s, in[0].dtype, in[0].device}};
}

void op::MaxBackward::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& s = attrs.shape;
  const int d = s.normalize_dim(attrs.dim);
  const int64_t outer = s.prod(0, d), n = s[d], inner = s.prod(d + 1, s.ndim());
  const int32_t* idx = in[1].data<int32_t>();
  const int64_t m = outer * inner;
  for (int64_t j = 0; j < m; ++j)  // checked before the parallel loop (no throwing inside it)
    TS_CHECK(idx[j] >= 0 && idx[j] < n, ValueError,
             "max_backward: index " << idx[j] << " at position " << j << " is out of range for size " << n
                                    << " of dim " << attrs.dim << " of " << s);
  std::memset(out[0].data_ptr(), 0, out[0].nbytes());
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = in[0].data<T>();
    T* dx = out[0].data<T>();
    // Each (o, i) writes one distinct element: no two iterations touch the same place.
#pragma omp parallel for if (m > kParallelGrain)
    for (int64_t j = 0; j < m; ++j) {
      const int64_t o = j / inner, i = j % inner;
      dx[(o * n + idx[j]) * inner + i] = g[j];
    }
  });
}

}  // namespace tessera
