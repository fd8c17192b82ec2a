// relu on the GPU: y = max(x, 0), one thread per element. `x < 0` is false for NaN, so NaN
// propagates (as on the CPU).
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/relu/relu.h"

namespace tessera {

void op::Relu::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  cuda::unary_op(in[0], out[0], kName, [] __device__(auto v) {
    using A = decltype(v);
    return v < A(0) ? A(0) : v;
  });
}

}  // namespace tessera
