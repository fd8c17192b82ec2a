#include "kernels/cast_col_sum/cast_col_sum.h"

#include <vector>

#include "kernels/common/dispatch.h"

namespace tessera {

std::vector<Tensor> cast_col_sum(const Tensor& x, DType dtype) { return call<CastColSum>({dtype}, {x}); }

std::vector<TensorMeta> CastColSum::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1);
  const TensorMeta& x = in[0];
  check_floating(kName, x, "x");
  TS_CHECK(is_floating(attrs.dtype), DTypeError,
           "cast_col_sum: target dtype " << dtype_name(attrs.dtype) << " is not floating (x " << x << ")");
  TS_CHECK(x.shape.ndim() == 2, ShapeError, "cast_col_sum: x must be [N, M], got " << x);
  return {TensorMeta{x.shape, attrs.dtype, x.device}, TensorMeta{Shape{x.shape[1]}, x.dtype, x.device}};
}

// bf16/f16 arrive widened to f32 (and a bf16/f16 y is rounded by the op machinery): y is
// converted element by element, s summed per column in double, row by row (as sum(x, 0) does).
void CastColSum::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const int64_t n = in[0].size(0), m = in[0].size(1);
  dispatch_float(in[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = in[0].data<T>();
    T* s = out[1].data<T>();
    convert_elements(x, in[0].dtype(), out[0].data_ptr(), out[0].dtype(), n * m);
    std::vector<double> acc(static_cast<size_t>(m), 0.0);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < m; ++c) acc[c] += x[r * m + c];
    for (int64_t c = 0; c < m; ++c) s[c] = static_cast<T>(acc[c]);
  });
}

}  // namespace tessera
