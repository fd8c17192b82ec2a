#include "kernels/col_sum/col_sum.h"

#include <vector>

#include "kernels/sum/sum.h"

namespace tessera {

Tensor col_sum(const Tensor& x) { return call<op::ColSum>({}, {x})[0]; }

std::vector<TensorMeta> op::ColSum::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  check_num_inputs(kName, in, 1);
  const TensorMeta& x = in[0];
  check_floating(kName, x, "x");
  TS_CHECK(x.shape.ndim() == 2, ShapeError, "col_sum: x must be [N, M], got " << x);
  const DType acc = x.dtype == DType::f64 ? DType::f64 : DType::f32;
  return {TensorMeta{Shape{x.shape[1]}, acc, x.device}};
}

// sum's CPU kernel (column sums in double): bf16/f16 x arrives widened to f32, s's dtype.
void op::ColSum::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  op::Sum::cpu({in[0]}, {out[0]}, op::Sum::Attrs{0, false});
}

}  // namespace tessera
