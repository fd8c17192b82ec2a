// slice on the GPU (when the slice is not contiguous in x, so not a view): x viewed as
// [outer, size(dim)·inner] bytes; the output rows are the columns [b·inner, e·inner) of x's rows,
// one strided row copy (kernels/common/cuda/byte_copy.cuh: one thread per word).
#include "kernels/common/cuda/byte_copy.cuh"
#include "kernels/slice/slice.h"

namespace tessera {

void op::Slice::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& s = in[0].shape();
  const int d = s.normalize_dim(attrs.dim);
  auto [b, e] = detail::slice_bounds(s[d], attrs.start, attrs.end);
  const int64_t es = static_cast<int64_t>(dtype_size(in[0].dtype()));
  const int64_t inner_bytes = s.prod(d + 1, s.ndim()) * es;
  const int64_t outer = s.prod(0, d), bytes = (e - b) * inner_bytes;
  if (bytes == 0 || outer == 0) return;
  const char* x = static_cast<const char*>(in[0].data_ptr()) + b * inner_bytes;
  if (x == out[0].data_ptr()) return;  // executors may hand a view its own input's storage
  cuda::copy_rows(out[0].data_ptr(), bytes, x, s[d] * inner_bytes, bytes, outer, cuda::current_stream(out[0]));
}

}  // namespace tessera
