// neg on the GPU: y = -x, one thread per element (kernels/common/cuda/elementwise.cuh).
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/neg/neg.h"

namespace tessera {

void op::Neg::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  cuda::unary_op(in[0], out[0], kName, [] __device__(auto v) { return -v; });
}

}  // namespace tessera
