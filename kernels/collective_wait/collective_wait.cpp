#include "kernels/collective_wait/collective_wait.h"

#include <cstring>

namespace tessera {

Tensor collective_wait(const Tensor& x, std::shared_ptr<Collective> group, int ticket) {
  return call<op::CollectiveWait>({std::move(group), ticket}, {x})[0];
}

std::vector<TensorMeta> op::CollectiveWait::infer(const std::vector<TensorMeta>& in, const Attrs& a) {
  check_num_inputs(kName, in, 1);
  TS_CHECK(a.group != nullptr, ValueError, "collective_wait: no process group");
  return {in[0]};
}

void op::CollectiveWait::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  a.group->join(a.ticket);
  if (out[0].data_ptr() != in[0].data_ptr()) std::memcpy(out[0].data_ptr(), in[0].data_ptr(), in[0].nbytes());
}

std::vector<Tensor> op::CollectiveWait::backward(const BackwardContext&, const Attrs&) { return {}; }

}  // namespace tessera
