#include "kernels/add_scalar/add_scalar.h"

#include "kernels/common/elementwise.h"
#include "kernels/common/unary.h"
#include "kernels/neg/neg.h"

namespace tessera {

Tensor add(const Tensor& x, double s) { return call<op::AddScalar>({s}, {x})[0]; }
Tensor sub(const Tensor& x, double s) { return add(x, -s); }
Tensor sub(double s, const Tensor& x) { return add(neg(x), s); }

std::vector<TensorMeta> op::AddScalar::infer(const std::vector<TensorMeta>& in, const Attrs&) {
  return infer_unary_floating(kName, in);
}

void op::AddScalar::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T s = static_cast<T>(attrs.scalar);
    cpu::unary_map<T, T>(in[0], out[0], [s](T x) { return x + s; });
  });
}

std::vector<Tensor> op::AddScalar::backward(const BackwardContext& ctx, const Attrs&) { return {ctx.grad_output()}; }

}  // namespace tessera
