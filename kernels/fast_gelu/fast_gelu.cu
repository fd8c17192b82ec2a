// fast_gelu on the GPU: y = x·σ(a·x) = x / (1 + e^(-a·x)), a = 1.702 rounded to the compute
// type (as on the CPU); one thread per element, in acc_t, rounded once.
#include "kernels/common/cuda/device_math.cuh"
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/fast_gelu/fast_gelu.h"

namespace tessera {

void op::FastGelu::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const double alpha = kAlpha;
  cuda::unary_op(in[0], out[0], kName, [alpha] __device__(auto v) {
    using A = decltype(v);
    return v / (A(1) + cuda::dev_exp(-static_cast<A>(alpha) * v));
  });
}

}  // namespace tessera
