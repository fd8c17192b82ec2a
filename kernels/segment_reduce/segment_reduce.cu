// segment_reduce on CUDA tensors: the group queues the reductions on its own stream
// (core/collective.h); no kernel of tessera's own.
#include "kernels/segment_reduce/segment_reduce.h"

namespace tessera {

void op::SegmentReduce::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  a.group->start_reduce(in[0], out[0], a.segments, a.average, a.ticket);
}

}  // namespace tessera
