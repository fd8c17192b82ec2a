// exp on the GPU: y = e^x, one thread per element, in acc_t (f32 for bf16/f16), rounded once.
#include "kernels/common/cuda/device_math.cuh"
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/exp/exp.h"

namespace tessera {

void op::Exp::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  cuda::unary_op(in[0], out[0], kName, [] __device__(auto v) { return cuda::dev_exp(v); });
}

}  // namespace tessera
