#include "kernels/segment_reduce/segment_reduce.h"

namespace tessera {

Tensor segment_reduce(const Tensor& x, std::shared_ptr<Collective> group, std::vector<Collective::Segment> segments,
                      bool average, int ticket) {
  return call<op::SegmentReduce>({std::move(group), std::move(segments), average, ticket}, {x})[0];
}

std::vector<TensorMeta> op::SegmentReduce::infer(const std::vector<TensorMeta>& in, const Attrs& a) {
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

void op::SegmentReduce::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  a.group->start_reduce(in[0], out[0], a.segments, a.average, a.ticket);
}

std::vector<Tensor> op::SegmentReduce::backward(const BackwardContext&, const Attrs&) { return {}; }

}  // namespace tessera
