// slice_backward on the GPU: out [outer, shape[dim]·inner] bytes is zeroed (all-bits-zero is 0
// in every dtype), then g's rows [outer, n·inner] are copied to the columns
// [start·inner, (start + n)·inner): a memset and one strided row copy, both on out's stream.
#include "kernels/common/cuda/byte_copy.cuh"
#include "kernels/slice_backward/slice_backward.h"

namespace tessera {

void op::SliceBackward::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& s = attrs.shape;
  const int d = s.normalize_dim(attrs.dim);
  const int64_t es = static_cast<int64_t>(dtype_size(out[0].dtype()));
  const int64_t inner_bytes = s.prod(d + 1, s.ndim()) * es;
  const int64_t outer = s.prod(0, d), n = in[0].shape()[d];
  const int64_t row_bytes = s[d] * inner_bytes, head = attrs.start * inner_bytes, body = n * inner_bytes;
  if (out[0].numel() == 0) return;
  char* y = static_cast<char*>(out[0].data_ptr());
  const cudaStream_t stream = cuda::current_stream(out[0]);
  TS_CUDA_CHECK(cudaMemsetAsync(y, 0, out[0].nbytes(), stream));
  cuda::copy_rows(y + head, row_bytes, in[0].data_ptr(), body, body, outer, stream);
}

}  // namespace tessera
