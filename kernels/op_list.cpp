#include "kernels/op_list.h"

#include <string>
#include <vector>

#include "kernels/ops.h"

namespace tessera {

// Instantiating each op's OpInstanceT pulls in its infer, cpu and backward: an op without
// one of them does not link.
#define TS_INSTANTIATE_OP(Op) template class detail::OpInstanceT<op::Op>;
TS_OP_LIST(TS_INSTANTIATE_OP)
#undef TS_INSTANTIATE_OP

#ifdef TESSERA_WITH_CUDA
// In CUDA builds every listed op has a CUDA kernel: one not declared fails here, one declared
// but not defined (kernels/<op>/<op>.cu) fails to link.
#define TS_REQUIRE_CUDA_KERNEL(Op) \
  static_assert(detail::has_cuda_kernel<op::Op>::value, #Op " has no CUDA kernel (declare and define Op::cuda)");
TS_OP_LIST(TS_REQUIRE_CUDA_KERNEL)
#undef TS_REQUIRE_CUDA_KERNEL
#endif

/// Names of all ops, in op-list order.
const std::vector<std::string>& op_names() {
#define TS_OP_NAME(Op) op::Op::kName,
  static const std::vector<std::string> names{TS_OP_LIST(TS_OP_NAME)};
#undef TS_OP_NAME
  return names;
}

}  // namespace tessera
