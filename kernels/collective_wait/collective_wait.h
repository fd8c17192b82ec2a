// collective_wait: the join of an all_reduce (kernels/all_reduce) started with the same ticket.
// Its output is the reduced tensor, readable from then on (in the order of the device's stream).
// Compiled steps schedule it as late as they can, after the last backward node (OpBase::kJoin),
// so that the reduction overlaps the rest of backward.
#pragma once

#include <memory>

#include "core/collective.h"
#include "core/op.h"

namespace tessera {

/// x (an all_reduce result) once reduction `ticket` of `group` is done. Not differentiable.
Tensor collective_wait(const Tensor& x, std::shared_ptr<Collective> group, int ticket);

namespace op {
/// out = x after group.join(ticket); out is x's buffer when planned in place (else a copy).
struct CollectiveWait : OpBase {
  static constexpr const char* kName = "collective_wait";
  static constexpr bool kDifferentiable = false;
  static constexpr bool kHalfNative = true;
  static constexpr bool kInPlace = true;
  static constexpr bool kJoin = true;
  struct Attrs {
    std::shared_ptr<Collective> group;
    int ticket = 0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
