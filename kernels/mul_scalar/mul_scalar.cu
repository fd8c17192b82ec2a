// mul_scalar on the GPU: y = s·x, s rounded to the compute type first (f32 for f32/bf16/f16,
// as the CPU's static_cast<T>); one thread per element.
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/mul_scalar/mul_scalar.h"

namespace tessera {

void op::MulScalar::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const double s = attrs.scalar;
  cuda::unary_op(in[0], out[0], kName, [s] __device__(auto v) { return v * static_cast<decltype(v)>(s); });
}

}  // namespace tessera
