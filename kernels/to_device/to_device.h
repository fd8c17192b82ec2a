#pragma once

#include "core/op.h"

namespace tessera {

/// x's data on `device` (x itself when it is there already). Differentiable: the gradient goes
/// back to x's device. Host-to-GPU copies go through pinned staging; GPU-to-host copies wait.
///
///   Tensor w = to_device(cpu_w, Device::cuda(0));   // also: cpu_w.to(Device::cuda(0))
Tensor to_device(const Tensor& x, Device device);

namespace op {
/// y = x on another device; y's meta is x's with the device replaced. Any dtype.
/// Backward: dx = to_device(dy, x's device).
struct ToDevice : OpBase {
  static constexpr const char* kName = "to_device";
  static constexpr bool kHalfNative = true;
  struct Attrs {
    Device device;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
