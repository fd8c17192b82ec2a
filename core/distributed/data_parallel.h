// Data parallelism's gradient step: each rank runs forward and backward on its own part of the
// batch, then the gradients are averaged over the ranks, bucket by bucket, so that every rank
// takes the same optimizer step as one process on the whole batch (when each rank's loss is the
// mean over its rows and the ranks' parts are equal). Three ways, one result:
//
//   average_gradients(params, buckets, group)   after backward, one blocking all-reduce a bucket;
//   GradientReducer                              eager steps: during backward (grad-ready hooks),
//                                                each bucket started as soon as it is final;
//   DataParallelUpdater                          compiled steps: the reductions are nodes of the
//                                                step's graph, overlapping the rest of backward.
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
// first): the first holds at most first_bytes of gradients, the others at most bucket_bytes; a
// parameter larger than a bucket has one of its own; a bucket holds one dtype. Each bucket's
// gradients are packed into one buffer, all-reduced as one call (the all_reduce op, which a CUDA
// group runs on its own stream; core/collective.h) and unpacked.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/distributed/process_group.h"
#include "core/graph/updater.h"
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
/// all-reduce starts as soon as the last of them is final, while backward goes on with the layers
/// below (on a CPU group the reduction itself runs then; the NCCL group queues it on its own
/// stream). finish() waits for them and writes the averages into the gradients.
///
///   dist::GradientReducer reducer(model.parameters(), group);   // hooks for its lifetime
///   loss.backward();          // the buckets are started as their gradients become final
///   reducer.finish();         // joins them, unpacks; checks that every bucket was reduced
///   opt.step();
///
/// Accumulation: set_enabled(false) for the micro-steps before the last (their backward reduces
/// nothing), true for the last; finish() after every backward, micro-steps included. Every rank's
/// backward must make the same buckets final in the same order (the same model); a parameter
/// without a gradient in a pass is the ValueError of average_gradients when its bucket is reduced.
class GradientReducer {
 public:
  GradientReducer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> group,
                  int64_t bucket_bytes = kBucketBytes, int64_t first_bytes = kFirstBucketBytes);
  /// Removes the hooks from the parameters (all of their grad-ready hooks) and joins what is in flight.
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  void set_enabled(bool enabled) { enabled_ = enabled; }
  /// After backward: waits for the reductions, writes the averaged gradients, then a ValueError
  /// naming the first bucket not reduced in this pass (a parameter whose gradient the pass never
  /// made final); the counts are reset for the next pass.
  void finish();
  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  /// Buckets started in the current pass, in the order they were (tests: the overlap).
  const std::vector<size_t>& reduced() const { return reduced_; }

 private:
  void ready(size_t bucket);
  void join_all();

  std::vector<Tensor> params_;
  std::shared_ptr<ProcessGroup> group_;
  std::vector<GradientBucket> buckets_;
  int first_ticket_ = 0;
  std::vector<int> waiting_;       ///< per bucket: gradients not final yet in this pass
  std::vector<Tensor> in_flight_;  ///< per bucket: its all_reduce result until finish()
  std::vector<size_t> reduced_;
  bool enabled_ = true;
};

/// The optimizer of a compiled data-parallel step: wraps `inner` (an optim::Optimizer, which keeps
/// its state, learning rate and step count) and, in the traced update, averages the gradients over
/// the group's ranks by bucket (plan_buckets over inner.params()) before handing them to inner's
/// update_all. In the step's graph each bucket is packed and its all_reduce started right after
/// the backward node that makes its last gradient, and its collective_wait comes after the last
/// backward node: on a CUDA group the reductions run on the group's stream beside the rest of
/// backward and are captured in the step's CUDA graph. Global-norm clipping inside inner sees the
/// averaged gradients. A group of one process still runs the all-reduce nodes (its reduction is a
/// copy), so that a world-size-1 step is the N-rank step's program.
///
///   dist::DataParallelUpdater dp(opt, group);
///   CompiledStep step = compile(loss_fn, model.named_parameters(), &dp, inputs, &rng);
///   step.run(my_rows);                      // every rank: its part of the global batch
class DataParallelUpdater : public ParamUpdater {
 public:
  DataParallelUpdater(ParamUpdater& inner, std::shared_ptr<ProcessGroup> group, int64_t bucket_bytes = kBucketBytes,
                      int64_t first_bytes = kFirstBucketBytes);

  const std::vector<Tensor>& params() const override { return inner_.params(); }
  std::vector<Tensor> state() const override { return inner_.state(); }
  /// ValueError: a bucket's gradients are reduced together (update_all).
  std::vector<ParamWrite> update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) override;
  std::vector<ParamWrite> update_all(const std::vector<Tensor>& grads, const Tensor& lr, const Tensor& step) override;
  double lr() const override { return inner_.lr(); }
  int64_t step_count() const override { return inner_.step_count(); }
  void advance() override { inner_.advance(); }

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  const ProcessGroup& group() const { return *group_; }

 private:
  ParamUpdater& inner_;
  std::shared_ptr<ProcessGroup> group_;
  std::vector<GradientBucket> buckets_;
  int first_ticket_ = 0;
};

/// The traced reduction DataParallelUpdater runs: for each bucket (indices into `tensors`), its
/// defined tensors packed (concat), all_reduce'd over `group` (the mean, or the sum) with ticket
/// first_ticket + bucket, joined (collective_wait) and unpacked as views; undefined tensors stay
/// undefined. For updaters of one's own (optim::ZeroUpdater); eagerly it runs as it is traced.
std::vector<Tensor> reduce_in_step(const std::vector<Tensor>& tensors, const std::vector<GradientBucket>& buckets,
                                   const std::shared_ptr<ProcessGroup>& group, int first_ticket, bool average);

/// Host numbers reduced over the ranks (the sum or the mean of each), every rank getting the same
/// values: moved to the group's device, all-reduced, read back (the host waits). For losses, counts
/// and flags that the ranks must agree on.
std::vector<double> all_reduce_values(std::vector<double> values, ProcessGroup& group, ReduceOp op);

/// Every parameter = rank 0's, in place (at the start of a run, so that ranks initialized apart
/// start equal), one broadcast per parameter in order.
void broadcast_parameters(const std::vector<Tensor>& params, ProcessGroup& group);

/// A ValueError on every rank naming the first parameter whose bits differ from rank 0's on some
/// rank, and on how many (a debug check that the ranks stayed in step).
void check_parameters_equal(const std::vector<Tensor>& params, ProcessGroup& group);

}  // namespace dist
}  // namespace tessera
