// segment_broadcast on CUDA tensors: the group queues the broadcasts on its own stream
// (core/collective.h); no kernel of tessera's own.
#include "kernels/segment_broadcast/segment_broadcast.h"

namespace tessera {

void op::SegmentBroadcast::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  a.group->start_broadcast(in[0], out[0], a.segments, a.ticket);
}

}  // namespace tessera
