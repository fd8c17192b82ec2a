// concat on the GPU: each input k, viewed as [outer, a_k·inner] bytes, is copied into the columns
// [off_k, off_k + a_k·inner) of the output rows [outer, (sum a)·inner]: one strided row copy per
// input (kernels/common/cuda/byte_copy.cuh: one thread per word, widest word that fits).
#include "kernels/common/cuda/byte_copy.cuh"
#include "kernels/concat/concat.h"

namespace tessera {

void op::Concat::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& os = out[0].shape();
  const int d = os.normalize_dim(attrs.dim);
  const int64_t outer = os.prod(0, d);
  const int64_t es = static_cast<int64_t>(dtype_size(out[0].dtype()));
  const int64_t row_bytes = os.prod(d, os.ndim()) * es;  // one outer index of the output
  if (out[0].numel() == 0) return;
  char* y = static_cast<char*>(out[0].data_ptr());
  const cudaStream_t stream = cuda::current_stream(out[0]);
  int64_t start = 0;  // where input k's bytes begin inside an output row
  for (const Tensor& x : in) {
    const int64_t bytes = x.shape().prod(d, os.ndim()) * es;
    cuda::copy_rows(y + start, row_bytes, x.data_ptr(), bytes, bytes, outer, stream);
    start += bytes;
  }
}

}  // namespace tessera
