// The group of one process (see process_group.h).
#include "core/distributed/process_group.h"

#include "core/error.h"
#include "kernels/copy/copy.h"
#include "kernels/reshape/reshape.h"
#include "kernels/slice/slice.h"

namespace tessera {
namespace dist {
namespace {

class SingleProcessGroup : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }
  void all_reduce(Tensor& t, ReduceOp) override {
    TS_CHECK(t.defined(), ValueError, "all_reduce: an undefined tensor");
  }
  void broadcast(Tensor& t, int root) override {
    TS_CHECK(t.defined(), ValueError, "broadcast: an undefined tensor");
    TS_CHECK(root == 0, ValueError, "broadcast: root " << root << " of a group of one process");
  }
  void barrier() override {}
};

}  // namespace

void ProcessGroup::start_all_reduce(const Tensor& in, const Tensor& out, bool average, int ticket) {
  TS_CHECK(ticket >= 0, ValueError, "all_reduce: ticket " << ticket << " is negative");
  if (out.data_ptr() != in.data_ptr()) copy_into(in, out);
  Tensor t = out;
  all_reduce(t, average ? ReduceOp::average : ReduceOp::sum);
}

namespace {

// Elements [offset, offset + count) of a flat contiguous tensor, as a tensor over its storage.
Tensor segment_of(const Tensor& t, const Collective::Segment& s, const char* call) {
  TS_CHECK(t.shape().ndim() == 1 && s.offset >= 0 && s.count >= 0 && s.offset + s.count <= t.numel(), ValueError,
           call << ": segment [" << s.offset << ", " << s.offset + s.count << ") of a tensor " << t.shape());
  return reshape(slice(t, 0, s.offset, s.offset + s.count), {s.count});
}

}  // namespace

void ProcessGroup::start_reduce(const Tensor& in, const Tensor& out, const std::vector<Segment>& segments, bool average,
                                int ticket) {
  TS_CHECK(ticket >= 0, ValueError, "reduce: ticket " << ticket << " is negative");
  if (out.data_ptr() != in.data_ptr()) copy_into(in, out);
  for (const Segment& s : segments) {
    TS_CHECK(s.root >= 0 && s.root < size(), ValueError, "reduce: root " << s.root << " of " << size() << " ranks");
    Tensor part = segment_of(out, s, "reduce");
    all_reduce(part, average ? ReduceOp::average : ReduceOp::sum);
  }
}

void ProcessGroup::start_broadcast(const Tensor& in, const Tensor& out, const std::vector<Segment>& segments,
                                   int ticket) {
  TS_CHECK(ticket >= 0, ValueError, "broadcast: ticket " << ticket << " is negative");
  if (out.data_ptr() != in.data_ptr()) copy_into(in, out);
  for (const Segment& s : segments) {
    Tensor part = segment_of(out, s, "broadcast");
    broadcast(part, s.root);
  }
}

void ProcessGroup::join(int) {}

std::shared_ptr<ProcessGroup> single_process_group() { return std::make_shared<SingleProcessGroup>(); }

}  // namespace dist
}  // namespace tessera
