// copy on the GPU: a device-to-device copy of x's bytes (any dtype), ordered on the device's stream
// (a memcpy node when the step is captured as a CUDA graph).
#include "core/cuda/check.cuh"
#include "kernels/copy/copy.h"

namespace tessera {

void op::Copy::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  if (in[0].nbytes() == 0) return;
  TS_CUDA_CHECK(cudaMemcpyAsync(out[0].data_ptr(), in[0].data_ptr(), in[0].nbytes(), cudaMemcpyDeviceToDevice,
                                cuda::current_stream(out[0])));
}

}  // namespace tessera
