// segment_reduce: each segment of a flat buffer summed (or averaged) over a process group's ranks
// into the rank that segment names: ZeRO-1's gradients to their owners (optim/zero.h). Started
// like all_reduce (kernels/all_reduce); collective_wait with the same ticket joins it.
#pragma once

#include <memory>
#include <vector>

#include "core/collective.h"
#include "core/op.h"

namespace tessera {

/// Starts the reduction of x (1-D) segment by segment; the result, read after collective_wait,
/// holds on each rank the segments whose root it is (the others unspecified). Not differentiable.
Tensor segment_reduce(const Tensor& x, std::shared_ptr<Collective> group, std::vector<Collective::Segment> segments,
                      bool average, int ticket);

namespace op {
/// out[s] on rank s.root = Σ_ranks x[s] (or the mean), for each segment s of the 1-D x; out has x's
/// meta. The kernel copies x into out unless they are one buffer and reduces out in place,
/// asynchronously on CUDA (Collective::start_reduce).
struct SegmentReduce : OpBase {
  static constexpr const char* kName = "segment_reduce";
  static constexpr bool kDifferentiable = false;
  static constexpr bool kHalfNative = true;
  static constexpr bool kInPlace = true;
  struct Attrs {
    std::shared_ptr<Collective> group;
    std::vector<Collective::Segment> segments;
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
