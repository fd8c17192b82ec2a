// Data parallelism's gradient step: each rank runs forward and backward on its own part of the
// batch, then the gradients are averaged over the ranks, bucket by bucket, so that every rank
// takes the same optimizer step as one process on the whole batch (when each rank's loss is the
// mean over its rows and the ranks' parts are equal).
//
//   const auto buckets = dist::plan_buckets(params);          // once
//   loss.backward();
//   dist::average_gradients(params, buckets, *group);         // then opt.step() on every rank
//
// Buckets take the parameters in reverse order (backward makes the last parameters' gradients
// first, so a later version can launch a bucket as soon as its gradients are final): the first
// holds at most first_bytes of gradients, the others at most bucket_bytes; a parameter larger
// than a bucket has one of its own; a bucket holds one dtype. Each bucket's gradients are packed
// into one buffer, all-reduced as one call and unpacked. What is not built yet (overlap with
// backward, CUDA tensors over NCCL, compiled steps) is listed in docs/distributed.md.
#pragma once

#include <cstdint>
#include <vector>

#include "core/distributed/process_group.h"
#include "core/tensor.h"

namespace tessera {
namespace dist {

constexpr int64_t kBucketBytes = int64_t{25} << 20;
constexpr int64_t kFirstBucketBytes = int64_t{1} << 20;

struct GradientBucket {
  std::vector<size_t> params;  ///< indices into the parameter list, in the bucket's order
  int64_t elements = 0;        ///< their gradients' elements together
  DType dtype = DType::f32;
};

/// The buckets of `params` (see above). A ValueError for an undefined parameter or a byte limit
/// below 1.
std::vector<GradientBucket> plan_buckets(const std::vector<Tensor>& params, int64_t bucket_bytes = kBucketBytes,
                                         int64_t first_bytes = kFirstBucketBytes);

/// Every parameter's gradient = its mean over the group's ranks, bucket by bucket (one
/// all-reduce per bucket, in bucket order). Every rank must call it with the same parameters and
/// buckets. A ValueError naming the parameter when one has no gradient (every rank must reduce
/// the same tensors); a size-1 group leaves the gradients as they are.
void average_gradients(const std::vector<Tensor>& params, const std::vector<GradientBucket>& buckets,
                       ProcessGroup& group);

}  // namespace dist
}  // namespace tessera
