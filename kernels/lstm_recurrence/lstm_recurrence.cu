// lstm_recurrence on the GPU: the persistent kernel of kernels/common/cuda/lstm_persistent.cu.
#include "core/cuda/check.cuh"
#include "kernels/common/cuda/lstm_persistent.h"
#include "kernels/lstm_recurrence/lstm_recurrence.h"

namespace tessera {

std::string detail::recurrence_unfused_reason(const TensorMeta& gx, int64_t hidden, const LayoutPtr& layout) {
  if (!gx.device.is_cuda()) return "gx is not on a CUDA device";
  if (gx.shape.ndim() != 3) return "gx is not [T, B, 4H]";
  const cuda::RecurrencePlan fwd = cuda::plan_recurrence(gx.device.index, gx.dtype, gx.shape[1], hidden, layout, false);
  if (!fwd.reason.empty()) return fwd.reason;
  return cuda::plan_recurrence(gx.device.index, gx.dtype, gx.shape[1], hidden, layout, true).reason;
}

void op::LstmRecurrence::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  cuda::recurrence_forward(in[0], in[1], in[2], in[3], has_bias(in.size(), attrs) ? in[4] : Tensor(), attrs.layout,
                           attrs.forget_bias, out[0], out[1], out[2], out[3], out[4]);
}

}  // namespace tessera
