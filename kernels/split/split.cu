// split on the GPU: x viewed as [outer, size(dim)·inner] bytes; output k takes the columns
// [off_k, off_k + sizes[k]·inner) of every row: one strided row copy per output
// (kernels/common/cuda/byte_copy.cuh: one thread per word, widest word that fits).
#include "kernels/common/cuda/byte_copy.cuh"
#include "kernels/split/split.h"

namespace tessera {

void op::Split::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& s = in[0].shape();
  const int d = s.normalize_dim(attrs.dim);
  const int64_t outer = s.prod(0, d);
  const int64_t es = static_cast<int64_t>(dtype_size(in[0].dtype()));
  const int64_t inner_bytes = s.prod(d + 1, s.ndim()) * es;
  const int64_t row_bytes = s[d] * inner_bytes;  // one outer index of x
  if (in[0].numel() == 0) return;
  const char* x = static_cast<const char*>(in[0].data_ptr());
  int64_t start = 0;  // where output k's bytes begin inside a row of x
  for (size_t k = 0; k < out.size(); ++k) {
    const int64_t bytes = attrs.sizes[k] * inner_bytes;
    cuda::copy_rows(out[k].data_ptr(), bytes, x + start, row_bytes, bytes, outer, cuda::current_stream(out[k]));
    start += bytes;
  }
}

}  // namespace tessera
