// clamp on the GPU: y = min(max(x, lo), hi), one thread per element in acc_t (f32 for
// bf16/f16). The bounds are rounded to the compute type as on the CPU; an absent bound is ±inf,
// which never clamps and lets NaN through (NaN < lo and NaN > hi are both false).
#include <limits>

#include "kernels/clamp/clamp.h"
#include "kernels/common/cuda/elementwise.cuh"

namespace tessera {

void op::Clamp::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const double inf = std::numeric_limits<double>::infinity();
  const double lo = attrs.lo ? *attrs.lo : -inf, hi = attrs.hi ? *attrs.hi : inf;
  cuda::unary_op(in[0], out[0], kName, [lo, hi] __device__(auto x) {
    using A = decltype(x);
    const A l = static_cast<A>(lo), h = static_cast<A>(hi);
    return x < l ? l : (x > h ? h : x);
  });
}

}  // namespace tessera
