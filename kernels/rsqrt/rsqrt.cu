// rsqrt on the GPU: y = 1/√x, one thread per element, in acc_t (f32 for bf16/f16), rounded once.
// Written as 1/sqrt (two correctly rounded steps, as Eigen does for f64) rather than the
// rsqrt approximation.
#include "kernels/common/cuda/device_math.cuh"
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/rsqrt/rsqrt.h"

namespace tessera {

void op::Rsqrt::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  cuda::unary_op(in[0], out[0], kName, [] __device__(auto v) { return decltype(v)(1) / cuda::dev_sqrt(v); });
}

}  // namespace tessera
