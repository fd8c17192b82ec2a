// sigmoid on the GPU: y = 1 / (1 + e^-x), one thread per element, in acc_t, rounded once.
// Saturates without NaN: e^-x overflows to inf for very negative x and 1/inf = 0.
#include "kernels/common/cuda/device_math.cuh"
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/sigmoid/sigmoid.h"

namespace tessera {

void op::Sigmoid::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  cuda::unary_op(in[0], out[0], kName, [] __device__(auto v) {
    using A = decltype(v);
    return A(1) / (A(1) + cuda::dev_exp(-v));
  });
}

}  // namespace tessera
