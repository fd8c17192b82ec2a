#include "kernels/relu/relu.h"

#include "kernels/common/elementwise.h"
#include "kernels/common/unary.h"
#include "kernels/ops.h"

namespace tessera {

Tensor relu(const Tensor& x) { return call<op::Relu>({}, {x})[0]; }

std::vector<TensorMeta> op::Relu::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  return infer_unary_floating(kName, in);
}

void op::Relu::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // `x < 0` is false for NaN, so NaN propagates.
    cpu::unary_map<T, T>(in[0], out[0], [](T x) { return x < T(0) ? T(0) : x; });
  });
}

// Gradient 1 where x > 0 (equivalently y > 0), 0 elsewhere (0 at the kink, by convention).
std::vector<Tensor> op::Relu::backward(const BackwardContext& ctx, const Attrs&) {
  return {masked_fill(ctx.grad_output(), le(ctx.output(0), 0.0), 0.0)};
}

}  // namespace tessera
