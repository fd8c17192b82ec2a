#include "kernels/reshape/reshape.h"

#include <cstring>

namespace tessera {

Tensor reshape(const Tensor& x, const std::vector<int64_t>& shape) {
  return call<op::Reshape>({shape}, {x})[0];
}

Tensor flatten(const Tensor& x, int start, int end) {
  const Shape& s = x.shape();
  if (s.ndim() == 0) return reshape(x, std::vector<int64_t>{1});
  int a = s.normalize_dim(start), b = s.normalize_dim(end);
  TS_CHECK(a <= b, ShapeError, "flatten: start dim " << start << " is after end dim " << end << " for shape " << s);
  std::vector<int64_t> out(s.begin(), s.begin() + a);
  out.push_back(s.prod(a, b + 1));
  out.insert(out.end(), s.begin() + b + 1, s.end());
  return reshape(x, out);
}

std::vector<TensorMeta> op::Reshape::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1);
  std::vector<int64_t> dims = attrs.shape;
  int infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      TS_CHECK(infer_at < 0, ShapeError, "reshape: more than one -1 in the target shape");
      infer_at = static_cast<int>(i);
    } else {
      TS_CHECK(dims[i] >= 0, ShapeError, "reshape: negative size " << dims[i] << " in the target shape");
      known *= dims[i];
    }
  }
  const int64_t n = in[0].numel();
  if (infer_at >= 0) {
    TS_CHECK(known > 0 && n % known == 0, ShapeError,
             "reshape: cannot infer the -1 size when reshaping " << in[0].shape << " (" << n << " elements)");
    dims[infer_at] = n / known;
    known *= dims[infer_at];
  }
  Shape out(dims);
  TS_CHECK(known == n, ShapeError, "reshape: cannot reshape " << in[0].shape << " (" << n << " elements) to " << out);
  return {TensorMeta{out, in[0].dtype, in[0].device}};
}

// Only reached when a graph executor materializes a reshape into its own buffer.
void op::Reshape::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  if (out[0].data_ptr() != in[0].data_ptr()) std::memcpy(out[0].data_ptr(), in[0].data_ptr(), in[0].nbytes());
}

std::vector<Tensor> op::Reshape::backward(const BackwardContext& ctx, const Attrs&) {
  return {reshape(ctx.grad_output(), ctx.input_meta(0).shape)};
}

}  // namespace tessera
