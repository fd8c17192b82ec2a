#include "kernels/op_list.h"

#include <string>
#include <vector>

#include "kernels/ops.h"

namespace tessera {

// Instantiating each op's OpInstanceT pulls in its infer, cpu and backward: an op without
// one of them does not link.
#define TS_INSTANTIATE_OP(Op) template class detail::OpInstanceT<Op>;
TS_OP_LIST(TS_INSTANTIATE_OP)
#undef TS_INSTANTIATE_OP

/// Names of all ops, in op-list order.
const std::vector<std::string>& op_names() {
#define TS_OP_NAME(Op) Op::kName,
  static const std::vector<std::string> names{TS_OP_LIST(TS_OP_NAME)};
#undef TS_OP_NAME
  return names;
}

}  // namespace tessera
