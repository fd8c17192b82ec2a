// gelu on the GPU, one thread per element, in acc_t (f32 for bf16/f16), rounded once on store
// (to bf16/f16 for f32 x with a narrowed output: cuda::unary_op_narrowing).
// The constants are rounded to the compute type as on the CPU:
//   exact: 0.5·x·(1 + erf(x·r)),                 r = 1/√2
//   tanh:  0.5·x·(1 + tanh(k·(x + c·x³))),       k = √(2/π), c = 0.044715
#include "kernels/common/cuda/device_math.cuh"
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/gelu/gelu.h"

namespace tessera {

void op::Gelu::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  if (attrs.approximate == GeluApprox::tanh) {
    cuda::unary_op_narrowing(in[0], out[0], kName, [] __device__(auto x) {
      using A = decltype(x);
      const A k = static_cast<A>(0.7978845608028654), c = static_cast<A>(0.044715);
      return A(0.5) * x * (A(1) + cuda::dev_tanh(k * (x + c * (x * x * x))));
    });
  } else {
    cuda::unary_op_narrowing(in[0], out[0], kName, [] __device__(auto x) {
      using A = decltype(x);
      const A r = static_cast<A>(0.7071067811865475);
      return A(0.5) * x * (A(1) + cuda::dev_erf(x * r));
    });
  }
}

}  // namespace tessera
