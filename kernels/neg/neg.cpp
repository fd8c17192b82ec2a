#include "kernels/neg/neg.h"

#include "kernels/common/elementwise.h"
#include "kernels/common/unary.h"

namespace tessera {

Tensor neg(const Tensor& x) { return call<op::Neg>({}, {x})[0]; }

std::vector<TensorMeta> op::Neg::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  return infer_unary_floating(kName, in);
}

void op::Neg::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cpu::unary_map<T, T>(in[0], out[0], [](T x) { return -x; });
  });
}

std::vector<Tensor> op::Neg::backward(const BackwardContext& ctx, const Attrs&) { return {neg(ctx.grad_output())}; }

}  // namespace tessera
