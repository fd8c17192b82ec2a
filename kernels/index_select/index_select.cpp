#include "kernels/index_select/index_select.h"

#include <cstring>

#include "kernels/common/dispatch.h"
#include "kernels/index_select_backward/index_select_backward.h"
#include "kernels/reshape/reshape.h"

namespace tessera {

Tensor index_select(const Tensor& x, const Tensor& indices, int dim) {
  return call<op::IndexSelect>({dim}, {x, indices})[0];
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  TS_CHECK(weight.dim() == 2, ShapeError, "embedding: weight must be [V, C], got " << weight.meta());
  TS_CHECK(ids.dtype() == DType::i32, DTypeError, "embedding: ids must be i32, got " << ids.meta());
  std::vector<int64_t> out_shape = ids.shape().vec();
  out_shape.push_back(weight.size(1));
  Tensor rows = index_select(weight, reshape(ids, std::vector<int64_t>{ids.numel()}), 0);  // [N, C]
  return reshape(rows, out_shape);
}

std::vector<TensorMeta> op::IndexSelect::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 2);
  const Shape& s = in[0].shape;
  const int nd = s.ndim();
  TS_CHECK(in[1].dtype == DType::i32, DTypeError, "index_select: indices must be i32, got " << in[1]);
  TS_CHECK(in[1].shape.ndim() == 1, ShapeError, "index_select: indices must be 1-D, got " << in[1]);
  TS_CHECK(nd >= 1, ShapeError, "index_select: cannot index a 0-d tensor " << in[0]);
  TS_CHECK(attrs.dim >= -nd && attrs.dim < nd, ShapeError,
           "index_select: dim " << attrs.dim << " is out of range for " << in[0]);
  std::vector<int64_t> dims = s.vec();
  dims[s.normalize_dim(attrs.dim)] = in[1].shape[0];
  return {TensorMeta{Shape(dims), in[0].dtype, in[0].device}};
}

namespace cpu {

void check_indices(const char* op, const Tensor& indices, int64_t R, const TensorMeta& of) {
  const int32_t* idx = indices.data<int32_t>();
  const int64_t n = indices.numel();
  for (int64_t j = 0; j < n; ++j)
    TS_CHECK(idx[j] >= 0 && idx[j] < R, ValueError,
             op << ": index " << idx[j] << " at position " << j << " is out of range [0, " << R << ") for " << of);
}

}  // namespace cpu

void op::IndexSelect::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& s = in[0].shape();
  const int d = s.normalize_dim(attrs.dim);
  const int64_t R = s[d], outer = s.prod(0, d), N = in[1].numel();
  const int64_t row_bytes = s.prod(d + 1, s.ndim()) * static_cast<int64_t>(dtype_size(in[0].dtype()));
  cpu::check_indices(kName, in[1], R, in[0].meta());  // before the parallel loop: no throwing inside it
  if (row_bytes == 0) return;
  const int32_t* idx = in[1].data<int32_t>();
  const char* x = static_cast<const char*>(in[0].data_ptr());
  char* y = static_cast<char*>(out[0].data_ptr());
#pragma omp parallel for if (out[0].numel() > kParallelGrain)
  for (int64_t task = 0; task < outer * N; ++task) {
    const int64_t o = task / N, n = task % N;
    std::memcpy(y + task * row_bytes, x + (o * R + idx[n]) * row_bytes, row_bytes);
  }
}

std::vector<Tensor> op::IndexSelect::backward(const BackwardContext& ctx, const Attrs& attrs) {
  const Shape& s = ctx.input_meta(0).shape;
  return {index_select_backward(ctx.grad_output(), ctx.input(1), attrs.dim, s[attrs.dim]), Tensor()};
}

}  // namespace tessera
