#include "kernels/rsqrt/rsqrt.h"

#include <cmath>

#include "kernels/common/array_map.h"
#include "kernels/common/unary.h"
#include "kernels/ops.h"

namespace tessera {

Tensor rsqrt(const Tensor& x) { return call<op::Rsqrt>({}, {x})[0]; }

std::vector<TensorMeta> op::Rsqrt::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  return infer_unary_floating(kName, in);
}

void op::Rsqrt::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cpu::array_map<T>(in[0], out[0], [](const auto& x) { return x.rsqrt(); });
  });
}

// d/dx x^(-1/2) = -0.5·x^(-3/2) = -0.5·y³.
std::vector<Tensor> op::Rsqrt::backward(const BackwardContext& ctx, const Attrs&) {
  const Tensor& y = ctx.output(0);
  return {mul(mul(ctx.grad_output(), mul(mul(y, y), y)), -0.5)};
}

}  // namespace tessera
