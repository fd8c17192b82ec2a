#include "kernels/slice_backward/slice_backward.h"

#include <cstring>

#include "kernels/common/dispatch.h"
#include "kernels/slice/slice.h"

namespace tessera {

Tensor slice_backward(const Tensor& g, const Shape& shape, int dim, int64_t start) {
  return call<op::SliceBackward>({shape, dim, start}, {g})[0];
}

std::vector<TensorMeta> op::SliceBackward::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1);
  const Shape& s = attrs.shape;
  const Shape& gs = in[0].shape;
  const int nd = s.ndim();
  TS_CHECK(nd >= 1 && attrs.dim >= -nd && attrs.dim < nd, ShapeError,
           "slice_backward: dim " << attrs.dim << " is out of range for shape " << s);
  const int d = s.normalize_dim(attrs.dim);
  bool fits = gs.ndim() == nd && attrs.start >= 0 && attrs.start + gs[d] <= s[d];
  for (int j = 0; fits && j < nd; ++j) fits = j == d || gs[j] == s[j];
  TS_CHECK(fits, ShapeError,
           "slice_backward: gradient " << in[0] << " at start " << attrs.start << " of dim " << attrs.dim
                                       << " does not fit in shape " << s);
  return {TensorMeta{s, in[0].dtype, in[0].device}};
}

void op::SliceBackward::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& s = attrs.shape;
  const int d = s.normalize_dim(attrs.dim);
  const int64_t es = static_cast<int64_t>(dtype_size(out[0].dtype()));
  const int64_t inner_bytes = s.prod(d + 1, s.ndim()) * es;
  const int64_t outer = s.prod(0, d), n = in[0].shape()[d];
  const int64_t row_bytes = s[d] * inner_bytes, head = attrs.start * inner_bytes, body = n * inner_bytes;
  const char* g = static_cast<const char*>(in[0].data_ptr());
  char* y = static_cast<char*>(out[0].data_ptr());
  if (out[0].numel() == 0) return;
  // Per outer index: zeros before the slice, g's row, zeros after (all-bits-zero is 0 in every dtype).
#pragma omp parallel for if (out[0].numel() > kParallelGrain)
  for (int64_t o = 0; o < outer; ++o) {
    char* row = y + o * row_bytes;
    std::memset(row, 0, head);
    if (body) std::memcpy(row + head, g + o * body, body);
    std::memset(row + head + body, 0, row_bytes - head - body);
  }
}

std::vector<Tensor> op::SliceBackward::backward(const BackwardContext& ctx, const Attrs& attrs) {
  const int64_t n = ctx.input_meta(0).shape[attrs.dim];
  return {slice(ctx.grad_output(), attrs.dim, attrs.start, attrs.start + n)};
}

}  // namespace tessera
