#include "kernels/to_device/to_device.h"

#include <cstring>

#include "core/cuda/runtime.h"

namespace tessera {

Tensor to_device(const Tensor& x, Device device) {
  if (x.defined() && x.device() == device) return x;
  return call<op::ToDevice>({device}, {x})[0];
}

std::vector<TensorMeta> op::ToDevice::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1);
  TS_CHECK(attrs.device.index >= 0, DeviceError, kName << ": bad target device " << attrs.device);
  TensorMeta out = in[0];
  out.device = attrs.device;
  return {out};
}

// Both on the CPU (only reached through the op machinery directly).
void op::ToDevice::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  std::memcpy(out[0].data_ptr(), in[0].data_ptr(), in[0].nbytes());
}

// At least one side on a GPU: a copy ordered on the GPU side's stream (core/cuda/runtime.h).
void op::ToDevice::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  cuda::copy(out[0].data_ptr(), out[0].device(), in[0].data_ptr(), in[0].device(), in[0].nbytes());
}

std::vector<Tensor> op::ToDevice::backward(const BackwardContext& ctx, const Attrs&) {
  return {to_device(ctx.grad_output(), ctx.input_meta(0).device)};
}

}  // namespace tessera
