// min on the GPU: the kernels of max with the comparison reversed (kernels/max/max.cu).
#include "kernels/max/max.h"
#include "kernels/min/min.h"

namespace tessera {

void op::Min::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  cuda::extreme_along_dim(in[0], out[0], out[1], attrs.dim, true);
}

}  // namespace tessera
