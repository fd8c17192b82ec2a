// Data parallelism's gradient step: each rank runs forward and backward on its own part of the
// batch, then the gradients are averaged over the ranks, bucket by bucket, so that every rank
// takes the same optimizer step as one process on the whole batch (when each rank's loss is the
// mean over its rows and the ranks' parts are equal).
//
//   dist::broadcast_parameters(params, *group);               // once: rank 0's initial values
//   const auto buckets = dist::plan_buckets(params);          // once
//   loss.backward();                                          // (micro-steps: backward only)
//   dist::average_gradients(params, buckets, *group);         // then opt.step() on every rank
//
// Gradient accumulation: run backward on each micro-batch and average_gradients once, after the
// last; the gradients summed over the micro-steps are then averaged as one.
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

/// Every parameter = rank 0's, in place (at the start of a run, so that ranks initialized apart
/// start equal), one broadcast per parameter in order.
void broadcast_parameters(const std::vector<Tensor>& params, ProcessGroup& group);

/// A ValueError on every rank naming the first parameter whose bits differ from rank 0's on some
/// rank, and on how many (a debug check that the ranks stayed in step).
void check_parameters_equal(const std::vector<Tensor>& params, ProcessGroup& group);

}  // namespace dist
}  // namespace tessera
