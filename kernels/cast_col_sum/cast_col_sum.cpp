#include "kernels/cast_col_sum/cast_col_sum.h"

#include <vector>

#include "kernels/cast/cast.h"
#include "kernels/sum/sum.h"

namespace tessera {

std::vector<Tensor> cast_col_sum(const Tensor& x, DType dtype) { return call<op::CastColSum>({dtype}, {x}); }

std::vector<TensorMeta> op::CastColSum::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1);
  const TensorMeta& x = in[0];
  check_floating(kName, x, "x");
  TS_CHECK(is_floating(attrs.dtype), DTypeError,
           "cast_col_sum: target dtype " << dtype_name(attrs.dtype) << " is not floating (x " << x << ")");
  TS_CHECK(x.shape.ndim() == 2, ShapeError, "cast_col_sum: x must be [N, M], got " << x);
  return {TensorMeta{x.shape, attrs.dtype, x.device}, TensorMeta{Shape{x.shape[1]}, x.dtype, x.device}};
}

// The two ops' own CPU kernels (cast's chunked conversion, sum's column sums in double): the
// reference is exactly cast(x, dtype) and sum(x, 0). bf16/f16 arrive widened (a bf16/f16 y or s
// is rounded by the op machinery, as those ops' results are).
void op::CastColSum::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  op::Cast::cpu({in[0]}, {out[0]}, op::Cast::Attrs{out[0].dtype()});
  op::Sum::cpu({in[0]}, {out[1]}, op::Sum::Attrs{0, false});
}

}  // namespace tessera
