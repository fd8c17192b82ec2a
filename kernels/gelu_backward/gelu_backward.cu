// gelu_backward on the GPU: dx = g·gelu'(x), g and x of one shape; one thread per element, in
// acc_t (f32 for bf16/f16), rounded once on store; a bf16/f16 g of f32 x is widened on load
// (cuda::binary_op_widening). Same formulas and constants as the CPU:
//   exact: gelu'(x) = Φ(x) + x·φ(x) = 0.5·(1 + erf(x/√2)) + x·e^(-x²/2)/√(2π)
//   tanh:  t = tanh(k·(x + c·x³)):  gelu'(x) = 0.5·(1 + t) + 0.5·x·(1 - t²)·k·(1 + 3c·x²)
#include "kernels/common/cuda/device_math.cuh"
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/gelu_backward/gelu_backward.h"

namespace tessera {

void op::GeluBackward::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  if (attrs.approximate == GeluApprox::tanh) {
    cuda::binary_op_widening(in[0], in[1], out[0], kName, [] __device__(auto g, auto x) {
      using A = decltype(x);
      const A k = static_cast<A>(0.7978845608028654), c = static_cast<A>(0.044715);  // k = √(2/π)
      const A t = cuda::dev_tanh(k * (x + c * (x * x * x)));
      // Product rule on 0.5·x·(1 + t): the (1 + t) term, then x times dt/dx.
      return g * (A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * k * (A(1) + A(3) * c * (x * x)));
    });
  } else {
    cuda::binary_op_widening(in[0], in[1], out[0], kName, [] __device__(auto g, auto x) {
      using A = decltype(x);
      const A r = static_cast<A>(0.7071067811865475);             // 1/√2
      const A inv_sqrt_2pi = static_cast<A>(0.3989422804014327);  // 1/√(2π)
      return g * (A(0.5) * (A(1) + cuda::dev_erf(x * r)) + x * (inv_sqrt_2pi * cuda::dev_exp(A(-0.5) * (x * x))));
    });
  }
}

}  // namespace tessera
