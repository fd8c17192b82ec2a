// collective_wait on CUDA tensors: the device's stream waits for the group's stream (an event).
#include <cuda_runtime.h>

#include "core/cuda/check.cuh"
#include "kernels/collective_wait/collective_wait.h"

namespace tessera {

void op::CollectiveWait::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  a.group->join(a.ticket);
  if (out[0].data_ptr() != in[0].data_ptr())
    TS_CUDA_CHECK(cudaMemcpyAsync(out[0].data_ptr(), in[0].data_ptr(), in[0].nbytes(), cudaMemcpyDeviceToDevice,
                                  cuda::current_stream(in[0])));
}

}  // namespace tessera
