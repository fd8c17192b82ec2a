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
// first, so GradientReducer below reduces a bucket during backward as soon as its gradients are
// final): the first holds at most first_bytes of gradients, the others at most bucket_bytes; a
// parameter larger than a bucket has one of its own; a bucket holds one dtype. Each bucket's
// gradients are packed into one buffer, all-reduced as one call and unpacked. What is not built
// yet (asynchronous reduction, CUDA tensors over NCCL, compiled steps) is listed in
// docs/distributed.md.
#pragma once

#include <cstdint>
#include <memory>
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

/// average_gradients during backward: a grad-ready hook on every parameter
/// (Tensor::add_grad_ready_hook) counts the bucket's final gradients, and the bucket's
/// all-reduce runs as soon as the last of them is final, while backward goes on with the layers
/// below (on the CPU group the call itself runs then; a CUDA group will queue it on its own
/// stream).
///
///   dist::GradientReducer reducer(model.parameters(), group);   // hooks for its lifetime
///   loss.backward();          // the buckets are reduced as their gradients become final
///   reducer.finish();         // checks that every bucket was reduced; resets for the next pass
///   opt.step();
///
/// Accumulation: set_enabled(false) for the micro-steps before the last (their backward reduces
/// nothing), true for the last; finish() after every backward, micro-steps included. Every rank's backward must make the same buckets final in the
/// same order (the same model); a parameter without a gradient in a pass is the ValueError of
/// average_gradients when its bucket is reduced.
class GradientReducer {
 public:
  GradientReducer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> group,
                  int64_t bucket_bytes = kBucketBytes, int64_t first_bytes = kFirstBucketBytes);
  /// Removes the hooks from the parameters (all of their grad-ready hooks).
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  void set_enabled(bool enabled) { enabled_ = enabled; }
  /// After backward: a ValueError naming the first bucket not reduced in this pass (a parameter
  /// whose gradient the pass never made final), then the counts are reset for the next pass.
  void finish();
  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  /// Buckets reduced in the current pass, in the order they were (tests: the overlap).
  const std::vector<size_t>& reduced() const { return reduced_; }

 private:
  void ready(size_t bucket);

  std::vector<Tensor> params_;
  std::shared_ptr<ProcessGroup> group_;
  std::vector<GradientBucket> buckets_;
  std::vector<int> waiting_;  ///< per bucket: gradients not final yet in this pass
  std::vector<size_t> reduced_;
  bool enabled_ = true;
};

/// Every parameter = rank 0's, in place (at the start of a run, so that ranks initialized apart
/// start equal), one broadcast per parameter in order.
void broadcast_parameters(const std::vector<Tensor>& params, ProcessGroup& group);

/// A ValueError on every rank naming the first parameter whose bits differ from rank 0's on some
/// rank, and on how many (a debug check that the ranks stayed in step).
void check_parameters_equal(const std::vector<Tensor>& params, ProcessGroup& group);

}  // namespace dist
}  // namespace tessera
