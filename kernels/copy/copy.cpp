#include "kernels/copy/copy.h"

#include <cstring>

namespace tessera {

Tensor copy(const Tensor& x) { return call<Copy>({}, {x})[0]; }

void copy_into(const Tensor& src, const Tensor& dst) {
  TS_CHECK(src.meta() == dst.meta(), ShapeError, "copy_into: source " << src.meta() << " does not match destination "
                                                                     << dst.meta());
  call_out<Copy>({}, {src}, {dst});
}

std::vector<TensorMeta> Copy::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  check_num_inputs(kName, in, 1);
  return {in[0]};
}

void Copy::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  std::memcpy(out[0].data_ptr(), in[0].data_ptr(), in[0].nbytes());
}

std::vector<Tensor> Copy::backward(const BackwardContext& ctx, const Attrs&) { return {ctx.grad_output()}; }

}  // namespace tessera
