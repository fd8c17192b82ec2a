// adam_update on the GPU: the fused Adam-family kernel of kernels/common/cuda/adam_step.cuh
// with coupled (L2) weight decay, g' = g + wd·p. One thread per element.
#include "kernels/adam_update/adam_update.h"
#include "kernels/common/cuda/adam_step.cuh"

namespace tessera {

void AdamUpdate::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  cuda::adam_update(kName, in, out, {a.beta1, a.beta2, a.eps, a.weight_decay}, AdamDecay::coupled);
}

}  // namespace tessera
