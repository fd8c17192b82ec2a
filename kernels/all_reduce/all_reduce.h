// all_reduce: a process group's sum or mean of a tensor over the ranks, as an op, so that a
// compiled step holds its reductions as nodes of its graph (captured in the step's CUDA graph).
// The reduction may still be running when the op returns (on CUDA it is queued on the group's own
// stream): collective_wait (kernels/collective_wait) with the same ticket joins it before the
// result is read. See core/collective.h.
//
//   Tensor r = all_reduce(bucket, group, /*average=*/true, ticket);   // started
//   ... other work overlaps it ...
//   r = collective_wait(r, group, ticket);                              // now r can be read
#pragma once

#include <memory>

#include "core/collective.h"
#include "core/op.h"

namespace tessera {

/// Starts the sum (average) of x over `group`'s ranks into a new tensor of x's meta (f32 or
/// f64, or what the group's transport takes; an error names the rest). Not differentiable.
Tensor all_reduce(const Tensor& x, std::shared_ptr<Collective> group, bool average, int ticket);

namespace op {
/// out = Σ_ranks x (or the mean), x and out of one meta. The kernel copies x into out when they
/// are not the same buffer (so x is free as soon as the op returns, in stream order) and reduces
/// out in place, asynchronously on CUDA; out is read only after collective_wait(ticket).
struct AllReduce : OpBase {
  static constexpr const char* kName = "all_reduce";
  static constexpr bool kDifferentiable = false;
  static constexpr bool kHalfNative = true;  // the transport takes the dtype as it is
  static constexpr bool kInPlace = true;
  struct Attrs {
    std::shared_ptr<Collective> group;
    bool average = true;
    int ticket = 0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
