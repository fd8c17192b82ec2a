// all_reduce on CUDA tensors: the group queues the reduction on its own stream (core/collective.h);
// no kernel of tessera's own.
#include "kernels/all_reduce/all_reduce.h"

namespace tessera {

void op::AllReduce::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  a.group->start_all_reduce(in[0], out[0], a.average, a.ticket);
}

}  // namespace tessera
