// lstm_recurrence_backward on the GPU: the persistent kernel of kernels/common/cuda/lstm_persistent.cu.
#include "core/cuda/check.cuh"
#include "kernels/common/cuda/lstm_persistent.h"
#include "kernels/lstm_recurrence_backward/lstm_recurrence_backward.h"

namespace tessera {

void op::LstmRecurrenceBackward::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                      const Attrs& attrs) {
  cuda::recurrence_backward(in[0], in[1], in[2], in[3], in[4], in[5], in[6], attrs.layout, out[0], out[1], out[2]);
}

}  // namespace tessera
