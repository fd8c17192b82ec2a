#include "kernels/common/binary.h"

#include "core/op.h"
#include "kernels/reshape/reshape.h"
#include "kernels/sum/sum.h"

namespace tessera {

std::vector<TensorMeta> infer_broadcast_binary(const char* op, const std::vector<TensorMeta>& in) {
  check_num_inputs(op, in, 2);
  check_floating(op, in[0], "first input");
  check_same_dtype(op, in[0], in[1]);
  return {TensorMeta{broadcast_shapes(in[0].shape, in[1].shape, op), in[0].dtype, in[0].device}};
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  // Leading dims that broadcasting added, then dims where `shape` has size 1.
  Tensor r = g;
  const int lead = g.dim() - shape.ndim();
  for (int d = 0; d < lead; ++d) r = sum(r, 0, /*keepdim=*/false);
  for (int d = 0; d < shape.ndim(); ++d)
    if (shape[d] == 1 && r.size(d) != 1) r = sum(r, d, /*keepdim=*/true);
  return reshape(r, shape);
}

}  // namespace tessera
