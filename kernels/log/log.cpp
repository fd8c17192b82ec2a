#include "kernels/log/log.h"

#include <cmath>

#include "kernels/common/array_map.h"
#include "kernels/common/unary.h"
#include "kernels/ops.h"

namespace tessera {

Tensor log(const Tensor& x) { return call<op::Log>({}, {x})[0]; }

std::vector<TensorMeta> op::Log::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  return infer_unary_floating(kName, in);
}

void op::Log::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cpu::array_map<T>(in[0], out[0], [](const auto& x) { return x.log(); });
  });
}

// d/dx ln x = 1/x.
std::vector<Tensor> op::Log::backward(const BackwardContext& ctx, const Attrs&) {
  return {div(ctx.grad_output(), ctx.input(0))};
}

}  // namespace tessera
