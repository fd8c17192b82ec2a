// div on the GPU: y = a / b with numpy broadcasting (kernels/common/cuda/elementwise.cuh: one
// thread per output element, values in acc_t, rounded once on store). IEEE division (no fast
// math), so f32/f64 results equal the CPU's.
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/div/div.h"

namespace tessera {

void op::Div::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  cuda::binary_op(in[0], in[1], out[0], kName, [] __device__(auto a, auto b) { return a / b; });
}

}  // namespace tessera
