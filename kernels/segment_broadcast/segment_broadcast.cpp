#include "kernels/segment_broadcast/segment_broadcast.h"

namespace tessera {

Tensor segment_broadcast(const Tensor& x, std::shared_ptr<Collective> group, std::vector<Collective::Segment> segments,
                         int ticket) {
  return call<op::SegmentBroadcast>({std::move(group), std::move(segments), ticket}, {x})[0];
}

std::vector<TensorMeta> op::SegmentBroadcast::infer(const std::vector<TensorMeta>& in, const Attrs& a) {
  check_num_inputs(kName, in, 1);
  TS_CHECK(a.group != nullptr, ValueError, kName << ": no process group");
  TS_CHECK(a.ticket >= 0, ValueError, kName << ": ticket " << a.ticket << " is negative");
  TS_CHECK(in[0].shape.ndim() == 1, ShapeError, kName << ": x must be 1-D, got " << in[0]);
  for (const Collective::Segment& s : a.segments)
    TS_CHECK(s.offset >= 0 && s.count >= 0 && s.offset + s.count <= in[0].shape[0] && s.root >= 0 &&
                 s.root < a.group->size(),
             ValueError, kName << ": segment [" << s.offset << ", " << s.offset + s.count << ") root " << s.root
                               << " of x " << in[0] << " over " << a.group->size() << " ranks");
  return {in[0]};
}

void op::SegmentBroadcast::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  a.group->start_broadcast(in[0], out[0], a.segments, a.ticket);
}

std::vector<Tensor> op::SegmentBroadcast::backward(const BackwardContext&, const Attrs&) { return {}; }

}  // namespace tessera
