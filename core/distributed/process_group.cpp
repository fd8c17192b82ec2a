// The group of one process (see process_group.h).
#include "core/distributed/process_group.h"

#include "core/error.h"
#include "kernels/copy/copy.h"

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

void ProcessGroup::join(int) {}

std::shared_ptr<ProcessGroup> single_process_group() { return std::make_shared<SingleProcessGroup>(); }

}  // namespace dist
}  // namespace tessera
