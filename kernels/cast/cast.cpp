#include "kernels/cast/cast.h"

#include <algorithm>

#include "kernels/common/dispatch.h"

namespace tessera {

Tensor cast(const Tensor& x, DType dtype) { return call<op::Cast>({dtype}, {x})[0]; }

Tensor autocast::operand(const Tensor& t) {
  if (!enabled() || !t.defined() || t.dtype() != DType::f32) return t;
  // Parameters: leaves that require grad. Other tensors (activations) are cast each time.
  if (!(t.requires_grad() && t.is_leaf())) return cast(t, dtype());
  if (const Tensor* c = detail::cached_cast(t)) return *c;
  Tensor c = cast(t, dtype());
  detail::cache_cast(t, c);
  return c;
}

std::vector<TensorMeta> op::Cast::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1);
  TS_CHECK(static_cast<int>(attrs.dtype) <= static_cast<int>(DType::u8), ValueError,
           "cast: unknown target dtype " << static_cast<int>(attrs.dtype) << " for " << in[0]);
  return {TensorMeta{in[0].shape, attrs.dtype, in[0].device}};
}

void op::Cast::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const DType st = in[0].dtype(), dt = out[0].dtype();
  const size_t ss = dtype_size(st), ds = dtype_size(dt);
  const char* src = static_cast<const char*>(in[0].data_ptr());
  char* dst = static_cast<char*>(out[0].data_ptr());
  // Independent chunks of kParallelGrain elements, converted in parallel.
  const int64_t n = out[0].numel(), chunks = (n + kParallelGrain - 1) / kParallelGrain;
#pragma omp parallel for if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kParallelGrain, len = std::min(kParallelGrain, n - begin);
    convert_elements(src + begin * ss, st, dst + begin * ds, dt, len);
  }
}

std::vector<Tensor> op::Cast::backward(const BackwardContext& ctx, const Attrs&) {
  const DType in_t = ctx.input_meta(0).dtype;
  if (!is_floating(in_t) || !ctx.needs_input_grad(0)) return {Tensor()};
  return {cast(ctx.grad_output(), in_t)};
}

}  // namespace tessera
