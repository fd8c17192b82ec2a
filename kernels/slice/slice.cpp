#include "kernels/slice/slice.h"

#include <algorithm>
#include <cstring>

#include "kernels/common/dispatch.h"
#include "kernels/slice_backward/slice_backward.h"

namespace tessera {

Tensor slice(const Tensor& x, int dim, int64_t start, int64_t end) { return call<op::Slice>({dim, start, end}, {x})[0]; }

namespace detail {

std::pair<int64_t, int64_t> slice_bounds(int64_t size, int64_t start, int64_t end) {
  auto clamp = [size](int64_t i) {
    if (i < 0) i = i < -size ? 0 : i + size;  // written to avoid overflow for INT64_MIN
    return std::min(i, size);
  };
  const int64_t b = clamp(start);
  return {b, std::max(b, clamp(end))};
}

}  // namespace detail

std::vector<TensorMeta> op::Slice::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1);
  const Shape& s = in[0].shape;
  const int nd = s.ndim();
  TS_CHECK(nd >= 1, ShapeError, "slice: cannot slice a 0-d tensor " << in[0]);
  TS_CHECK(attrs.dim >= -nd && attrs.dim < nd, ShapeError,
           "slice: dim " << attrs.dim << " is out of range for " << in[0]);
  const int d = s.normalize_dim(attrs.dim);
  auto [b, e] = detail::slice_bounds(s[d], attrs.start, attrs.end);
  std::vector<int64_t> dims = s.vec();
  dims[d] = e - b;
  return {TensorMeta{Shape(dims), in[0].dtype, in[0].device}};
}

std::optional<size_t> op::Slice::view_offset(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  const Shape& s = in[0].shape;
  const int d = s.normalize_dim(attrs.dim);
  auto [b, e] = detail::slice_bounds(s[d], attrs.start, attrs.end);
  // Contiguous in x: a single outer index, or the whole dim (then it is all of x).
  if (s.prod(0, d) != 1 && !(b == 0 && e == s[d])) return std::nullopt;
  return static_cast<size_t>(b * s.prod(d + 1, s.ndim())) * dtype_size(in[0].dtype);
}

void op::Slice::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& s = in[0].shape();
  const int d = s.normalize_dim(attrs.dim);
  auto [b, e] = detail::slice_bounds(s[d], attrs.start, attrs.end);
  const int64_t es = static_cast<int64_t>(dtype_size(in[0].dtype()));
  const int64_t inner_bytes = s.prod(d + 1, s.ndim()) * es;
  const int64_t outer = s.prod(0, d), bytes = (e - b) * inner_bytes;
  if (bytes == 0) return;
  const char* x = static_cast<const char*>(in[0].data_ptr());
  char* y = static_cast<char*>(out[0].data_ptr());
  if (x + b * inner_bytes == y) return;  // executors may hand a view its own input's storage
#pragma omp parallel for if (out[0].numel() > kParallelGrain)
  for (int64_t o = 0; o < outer; ++o) std::memcpy(y + o * bytes, x + (o * s[d] + b) * inner_bytes, bytes);
}

std::vector<Tensor> op::Slice::backward(const BackwardContext& ctx, const Attrs& attrs) {
  const Shape& s = ctx.input_meta(0).shape;
  const int d = s.normalize_dim(attrs.dim);
  return {slice_backward(ctx.grad_output(), s, d, detail::slice_bounds(s[d], attrs.start, attrs.end).first)};
}

}  // namespace tessera
