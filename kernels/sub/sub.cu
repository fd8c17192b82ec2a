// sub on the GPU: y = a - b with numpy broadcasting (kernels/common/cuda/elementwise.cuh: one
// thread per output element, values in acc_t, rounded once on store).
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/sub/sub.h"

namespace tessera {

void op::Sub::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  cuda::binary_op(in[0], in[1], out[0], kName, [] __device__(auto a, auto b) { return a - b; });
}

}  // namespace tessera
