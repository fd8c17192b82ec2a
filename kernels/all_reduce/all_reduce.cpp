#include "kernels/all_reduce/all_reduce.h"

#include <cstring>

namespace tessera {

Tensor all_reduce(const Tensor& x, std::shared_ptr<Collective> group, bool average, int ticket) {
  return call<op::AllReduce>({std::move(group), average, ticket}, {x})[0];
}

std::vector<TensorMeta> op::AllReduce::infer(const std::vector<TensorMeta>& in, const Attrs& a) {
  check_num_inputs(kName, in, 1);
  TS_CHECK(a.group != nullptr, ValueError, "all_reduce: no process group");
  TS_CHECK(a.ticket >= 0, ValueError, "all_reduce: ticket " << a.ticket << " is negative");
  return {in[0]};
}

void op::AllReduce::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  a.group->start_all_reduce(in[0], out[0], a.average, a.ticket);
}

std::vector<Tensor> op::AllReduce::backward(const BackwardContext&, const Attrs&) { return {}; }

}  // namespace tessera
