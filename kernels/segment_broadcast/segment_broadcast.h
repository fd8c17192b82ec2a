// segment_broadcast: each segment of a flat buffer sent from the rank that segment names to every
// rank: ZeRO-1's parameters from their owners (optim/zero.h). Started like all_reduce
// (kernels/all_reduce); collective_wait with the same ticket joins it.
#pragma once

#include <memory>
#include <vector>

#include "core/collective.h"
#include "core/op.h"

namespace tessera {

/// Starts the broadcast of x (1-D) segment by segment; the result, read after collective_wait, is
/// on every rank each segment's root's x. Not differentiable.
Tensor segment_broadcast(const Tensor& x, std::shared_ptr<Collective> group, std::vector<Collective::Segment> segments,
                         int ticket);

namespace op {
/// out[s] = x[s] of rank s.root, on every rank, for each segment s of the 1-D x; out has x's meta.
/// The kernel copies x into out unless they are one buffer and broadcasts in place, asynchronously
/// on CUDA (Collective::start_broadcast).
struct SegmentBroadcast : OpBase {
  static constexpr const char* kName = "segment_broadcast";
  static constexpr bool kDifferentiable = false;
  static constexpr bool kHalfNative = true;
  static constexpr bool kInPlace = true;
  struct Attrs {
    std::shared_ptr<Collective> group;
    std::vector<Collective::Segment> segments;
    int ticket = 0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
