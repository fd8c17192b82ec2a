// reshape on the GPU. Eager mode never runs it (the output is a view of x: run_op skips the
// kernel), nor do graph plans (views are placed, their nodes skipped). This is for an executor
// that materializes a reshape into its own buffer: then a device-to-device copy of the bytes.
#include "core/cuda/check.cuh"
#include "kernels/reshape/reshape.h"

namespace tessera {

void op::Reshape::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  if (in[0].nbytes() == 0 || out[0].data_ptr() == in[0].data_ptr()) return;
  TS_CUDA_CHECK(cudaMemcpyAsync(out[0].data_ptr(), in[0].data_ptr(), in[0].nbytes(), cudaMemcpyDeviceToDevice,
                                cuda::current_stream(out[0])));
}

}  // namespace tessera
