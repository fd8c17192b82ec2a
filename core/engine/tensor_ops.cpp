// The parts of the Tensor API (core/tensor.h) that run an op: to(), clone() and the filling
// factories full/zeros/ones (the fill kernel for CUDA tensors). core/tensor.h is core's base and
// includes no op, so these are defined here, in the engine above the ops; their callers see only
// core/tensor.h. (Tensor::backward is defined with the backward pass, core/engine/backward.cpp.)
#include "core/tensor.h"

#include "core/op.h"
#include "kernels/copy/copy.h"
#include "kernels/fill/fill.h"
#include "kernels/to_device/to_device.h"

namespace tessera {

Tensor Tensor::to(Device device) const { return to_device(*this, device); }

Tensor Tensor::clone() const { return copy(*this); }

Tensor full(const Shape& shape, double value, TensorOptions opts) {
  bool rg = opts.requires_grad_;
  Tensor out = empty(shape, opts.requires_grad(false));
  if (out.device().is_cuda()) {  // the fill kernel, on the device's stream (no host copy)
    detail::run_op_into(detail::OpInstanceT<op::Fill>({out.meta(), value}), {}, {out});
    if (rg) out.requires_grad_();
    return out;
  }
  // Convert one value, then replicate its bytes.
  size_t es = dtype_size(out.dtype());
  unsigned char one[8];
  convert_elements(&value, DType::f64, one, out.dtype(), 1);
  auto* p = static_cast<unsigned char*>(out.data_ptr());
  for (int64_t i = 0; i < out.numel(); ++i)
    for (size_t b = 0; b < es; ++b) p[i * es + b] = one[b];
  if (rg) out.requires_grad_();
  return out;
}

Tensor zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0.0, opts); }
Tensor ones(const Shape& shape, TensorOptions opts) { return full(shape, 1.0, opts); }

}  // namespace tessera
