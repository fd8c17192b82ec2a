#include "kernels/neg/neg.h"

#include "kernels/common/elementwise.h"

namespace tessera {

Tensor neg(const Tensor& x) { return call<Neg>({}, {x})[0]; }

std::vector<TensorMeta> Neg::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  check_num_inputs(kName, in, 1);
  check_floating(kName, in[0]);
  return {in[0]};
}

void Neg::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cpu::unary_map<T, T>(in[0], out[0], [](T x) { return -x; });
  });
}

std::vector<Tensor> Neg::backward(const BackwardContext& ctx, const Attrs&) { return {neg(ctx.grad_output())}; }

}  // namespace tessera
