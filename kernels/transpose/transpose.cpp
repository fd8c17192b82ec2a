#include "kernels/transpose/transpose.h"

#include <numeric>
#include <utility>

#include "kernels/permute/permute.h"

namespace tessera {

Tensor transpose(const Tensor& x) { return call<op::Transpose>({}, {x})[0]; }

std::vector<TensorMeta> op::Transpose::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  check_num_inputs(kName, in, 1);
  const int nd = in[0].shape.ndim();
  TS_CHECK(nd >= 2, ShapeError, "transpose: needs at least 2 dims, got " << in[0]);
  std::vector<int64_t> dims = in[0].shape.vec();
  std::swap(dims[nd - 2], dims[nd - 1]);
  return {TensorMeta{Shape(dims), in[0].dtype, in[0].device}};
}

// The permute kernel with perm (0, ..., n-3, n-1, n-2): a batched tiled transpose.
void op::Transpose::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const int nd = in[0].dim();
  std::vector<int> perm(nd);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[nd - 2], perm[nd - 1]);
  cpu::permute_copy(in[0], out[0], perm);
}

std::vector<Tensor> op::Transpose::backward(const BackwardContext& ctx, const Attrs&) {
  return {transpose(ctx.grad_output())};
}

}  // namespace tessera
