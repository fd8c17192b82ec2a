#include "kernels/masked_fill/masked_fill.h"

#include <cmath>

#include "kernels/common/elementwise.h"

namespace tessera {

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  return call<op::MaskedFill>({value}, {x, mask})[0];
}

std::vector<TensorMeta> op::MaskedFill::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 2);
  const TensorMeta &x = in[0], &mask = in[1];
  TS_CHECK(mask.dtype == DType::u8, DTypeError, "masked_fill: mask must be u8, got " << mask << " for x " << x);
  bool fits = mask.shape.ndim() <= x.shape.ndim();
  for (int d = 1; fits && d <= mask.shape.ndim(); ++d)
    fits = mask.shape[-d] == 1 || mask.shape[-d] == x.shape[-d];
  TS_CHECK(fits, ShapeError, "masked_fill: mask " << mask << " does not broadcast to x " << x);
  const double v = attrs.value;
  const bool in_range = x.dtype == DType::i32 ? (v >= -2147483648.0 && v <= 2147483647.0)
                        : x.dtype == DType::u8 ? (v >= 0 && v <= 255)
                                               : true;
  TS_CHECK(is_floating(x.dtype) || (in_range && v == std::trunc(v)), ValueError,
           "masked_fill: value " << v << " does not fit x " << x);
  return {x};
}

void op::MaskedFill::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x = in[0], &mask = in[1];
  dispatch_numeric(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    const uint8_t* pm = mask.data<uint8_t>();
    T* py = out[0].data<T>();
    const T v = static_cast<T>(attrs.value);
    const Shape& s = x.shape();
    const int64_t n = x.numel();
    if (mask.shape() == s) {
#pragma omp parallel for if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) py[i] = pm[i] ? v : px[i];
      return;
    }
    // Broadcast mask: walk rows of x's last dim with the mask's strides (0 where broadcast).
    const int64_t inner = s.ndim() ? s[s.ndim() - 1] : 1;
    cpu::for_each_broadcast_row<1>(s, {mask.shape()}, [&](int64_t r, const auto& o, const auto& st) {
      for (int64_t j = 0; j < inner; ++j) py[r * inner + j] = pm[o[0] + j * st[0]] ? v : px[r * inner + j];
    });
  });
}

std::vector<Tensor> op::MaskedFill::backward(const BackwardContext& ctx, const Attrs&) {
  return {masked_fill(ctx.grad_output(), ctx.input(1), 0.0), Tensor()};
}

}  // namespace tessera
