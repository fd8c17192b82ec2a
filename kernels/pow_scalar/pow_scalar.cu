// pow_scalar on the GPU: y = x^p, one thread per element, in acc_t (f32 for bf16/f16), rounded
// once. Like the CPU, p = 2, 1, -1 take the exact forms x·x, x, 1/x; other exponents are rounded
// to the compute type and go through pow (NaN for negative x and non-integer p).
#include "kernels/common/cuda/device_math.cuh"
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/pow_scalar/pow_scalar.h"

namespace tessera {

void op::PowScalar::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const double p = attrs.exponent;
  if (p == 2.0) {
    cuda::unary_op(in[0], out[0], kName, [] __device__(auto x) { return x * x; });
  } else if (p == 1.0) {
    cuda::unary_op(in[0], out[0], kName, [] __device__(auto x) { return x; });
  } else if (p == -1.0) {
    cuda::unary_op(in[0], out[0], kName, [] __device__(auto x) { return decltype(x)(1) / x; });
  } else {
    cuda::unary_op(in[0], out[0], kName,
                   [p] __device__(auto x) { return cuda::dev_pow(x, static_cast<decltype(x)>(p)); });
  }
}

}  // namespace tessera
