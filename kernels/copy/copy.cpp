#include "kernels/copy/copy.h"

#include <cstring>

namespace tessera {

Tensor copy(const Tensor& x) { return call<op::Copy>({}, {x})[0]; }

void copy_into(const Tensor& src, const Tensor& dst) {
  TS_CHECK(src.meta() == dst.meta(), ShapeError, "copy_into: source " << src.meta() << " does not match destination "
                                                                     << dst.meta());
  call_out<op::Copy>({}, {src}, {dst});
}

std::vector<TensorMeta> op::Copy::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  check_num_inputs(kName, in, 1);
  return {in[0]};
}

void op::Copy::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  std::memcpy(out[0].data_ptr(), in[0].data_ptr(), in[0].nbytes());
}

std::vector<Tensor> op::Copy::backward(const BackwardContext& ctx, const Attrs&) { return {ctx.grad_output()}; }

}  // namespace tessera
