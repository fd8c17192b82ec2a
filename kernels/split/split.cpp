#include "kernels/split/split.h"

#include <algorithm>
#include <cstring>

#include "kernels/common/dispatch.h"
#include "kernels/concat/concat.h"

namespace tessera {

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim) {
  return call<op::Split>({sizes, dim}, {x});
}

std::vector<Tensor> chunk(const Tensor& x, int64_t n, int dim) {
  TS_CHECK(n >= 1, ValueError, "chunk: number of chunks must be >= 1, got " << n << " for " << x.meta());
  TS_CHECK(x.dim() >= 1 && dim >= -x.dim() && dim < x.dim(), ShapeError,
           "chunk: dim " << dim << " is out of range for " << x.meta());
  const int64_t total = x.size(dim), piece = (total + n - 1) / n;
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < total; at += piece) sizes.push_back(std::min(piece, total - at));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, dim);
}

std::vector<TensorMeta> op::Split::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1);
  const Shape& s = in[0].shape;
  const int nd = s.ndim();
  TS_CHECK(nd >= 1, ShapeError, "split: cannot split a 0-d tensor " << in[0]);
  TS_CHECK(attrs.dim >= -nd && attrs.dim < nd, ShapeError,
           "split: dim " << attrs.dim << " is out of range for " << in[0]);
  TS_CHECK(!attrs.sizes.empty(), ValueError, "split: no sizes given for " << in[0]);
  const int d = s.normalize_dim(attrs.dim);
  int64_t total = 0;
  for (int64_t z : attrs.sizes) {
    TS_CHECK(z >= 0, ValueError, "split: negative size " << z << " when splitting " << in[0]);
    total += z;
  }
  TS_CHECK(total == s[d], ShapeError,
           "split: sizes add up to " << total << " but dim " << attrs.dim << " of " << in[0] << " has size " << s[d]);
  std::vector<TensorMeta> out;
  for (int64_t z : attrs.sizes) {
    std::vector<int64_t> dims = s.vec();
    dims[d] = z;
    out.push_back(TensorMeta{Shape(dims), in[0].dtype, in[0].device});
  }
  return out;
}

void op::Split::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Shape& s = in[0].shape();
  const int d = s.normalize_dim(attrs.dim);
  const int64_t outer = s.prod(0, d);
  const int64_t es = static_cast<int64_t>(dtype_size(in[0].dtype()));
  const int64_t inner_bytes = s.prod(d + 1, s.ndim()) * es;
  const int64_t row_bytes = s[d] * inner_bytes;  // one outer index of x
  const int64_t nout = static_cast<int64_t>(out.size());
  std::vector<int64_t> bytes(nout), start(nout);
  for (int64_t k = 0, off = 0; k < nout; ++k) {
    bytes[k] = attrs.sizes[k] * inner_bytes;
    start[k] = off;
    off += bytes[k];
  }
  const char* x = static_cast<const char*>(in[0].data_ptr());
#pragma omp parallel for if (in[0].numel() > kParallelGrain)
  for (int64_t task = 0; task < outer * nout; ++task) {
    const int64_t o = task / nout, k = task % nout;
    if (bytes[k] == 0) continue;
    std::memcpy(static_cast<char*>(out[k].data_ptr()) + o * bytes[k], x + o * row_bytes + start[k], bytes[k]);
  }
}

std::vector<Tensor> op::Split::backward(const BackwardContext& ctx, const Attrs& attrs) {
  std::vector<Tensor> gs;
  for (size_t k = 0; k < attrs.sizes.size(); ++k) gs.push_back(ctx.grad_output(static_cast<int>(k)));
  return {concat(gs, attrs.dim)};
}

}  // namespace tessera
