#include "kernels/concat/concat.h"

#include <cstring>

#include "kernels/common/dispatch.h"
#include "kernels/split/split.h"

namespace tessera {

Tensor concat(const std::vector<Tensor>& xs, int dim) { return call<op::Concat>({dim}, xs)[0]; }

std::vector<TensorMeta> op::Concat::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  TS_CHECK(!in.empty(), ValueError, "concat: needs at least one input");
  const Shape& s0 = in[0].shape;
  const int nd = s0.ndim();
  TS_CHECK(nd >= 1, ShapeError, "concat: cannot concatenate 0-d tensors, got " << in[0]);
  TS_CHECK(attrs.dim >= -nd && attrs.dim < nd, ShapeError,
           "concat: dim " << attrs.dim << " is out of range for " << in[0]);
  const int d = s0.normalize_dim(attrs.dim);
  std::vector<int64_t> dims = s0.vec();
  for (size_t k = 1; k < in.size(); ++k) {
    check_same_dtype(kName, in[0], in[k]);
    const Shape& s = in[k].shape;
    bool fits = s.ndim() == nd;
    for (int j = 0; fits && j < nd; ++j) fits = j == d || s[j] == s0[j];
    TS_CHECK(fits, ShapeError,
             "concat: input " << k << " " << in[k] << " does not match input 0 " << in[0] << " outside dim "
                              << attrs.dim);
    dims[d] += s[d];
  }
  return {TensorMeta{Shape(dims), in[0].dtype, in[0].device}};
}

void op::Concat::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& os = out[0].shape();
  const int d = os.normalize_dim(attrs.dim);
  const int64_t outer = os.prod(0, d);
  const int64_t es = static_cast<int64_t>(dtype_size(out[0].dtype()));
  const int64_t row_bytes = os.prod(d, os.ndim()) * es;  // one outer index of the output
  // Bytes of input k per outer index, and where they start inside an output row.
  const int64_t nin = static_cast<int64_t>(in.size());
  std::vector<int64_t> bytes(nin), start(nin);
  for (int64_t k = 0, off = 0; k < nin; ++k) {
    bytes[k] = in[k].shape().prod(d, os.ndim()) * es;
    start[k] = off;
    off += bytes[k];
  }
  char* y = static_cast<char*>(out[0].data_ptr());
#pragma omp parallel for if (out[0].numel() > kParallelGrain)
  for (int64_t task = 0; task < outer * nin; ++task) {
    const int64_t o = task / nin, k = task % nin;
    if (bytes[k] == 0) continue;
    std::memcpy(y + o * row_bytes + start[k], static_cast<const char*>(in[k].data_ptr()) + o * bytes[k], bytes[k]);
  }
}

std::vector<Tensor> op::Concat::backward(const BackwardContext& ctx, const Attrs& attrs) {
  const int n = ctx.num_inputs();
  const int d = ctx.input_meta(0).shape.normalize_dim(attrs.dim);
  std::vector<int64_t> sizes(n);
  for (int k = 0; k < n; ++k) sizes[k] = ctx.input_meta(k).shape[d];
  std::vector<Tensor> grads = split(ctx.grad_output(), sizes, attrs.dim);
  for (int k = 0; k < n; ++k)
    if (!ctx.needs_input_grad(k)) grads[k] = Tensor();
  return grads;
}

}  // namespace tessera
