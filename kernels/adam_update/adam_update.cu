// adam_update on the GPU: the fused Adam-family kernel of kernels/common/cuda/adam_step.cuh
// with the op's decay mode (coupled: g' = g + wd·p; decoupled: p' = p·(1 − lr·wd) − the Adam
// step). One thread per element.
#include "kernels/adam_update/adam_update.h"
#include "kernels/common/cuda/adam_step.cuh"

namespace tessera {

void op::AdamUpdate::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  cuda::adam_update(kName, in, out, {a.beta1, a.beta2, a.eps, a.weight_decay}, a.decay);
}

}  // namespace tessera
