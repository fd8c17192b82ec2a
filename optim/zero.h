// ZeRO stage 1 for compiled data-parallel steps: the optimizer state is sharded over the ranks by
// parameter, so each rank holds the moments of about 1/W of the parameters.
//
//   const auto owners = optim::shard_owners(model.parameters(), group->size());
//   optim::AdamW opt(optim::owned(model.parameters(), owners, group->rank()), AdamWOptions(3e-4));
//   optim::ZeroUpdater zero(opt, model.named_parameters(), group, /*clip_norm=*/1.0);
//   CompiledStep step = compile(loss_fn, model.named_parameters(), &zero, my_rows, &rng);
//
// A step, traced (its collectives are nodes of the step's graph, started right after the backward
// node that makes a bucket's last gradient and joined after the last backward node, as in
// dist::DataParallelUpdater):
//   1. each gradient averaged over the ranks onto its owner, by bucket (segment_reduce: on NCCL one
//      grouped ncclReduce per bucket, a gradient to its owner: half an all-reduce's traffic);
//   2. the global-norm clip factor: each rank's sum of squares over its gradients, summed over
//      the ranks (one 8-byte all-reduce);
//   3. the owner of each parameter updates it and its state with its optimizer (update_scaled);
//   4. every parameter's new value from its owner to every rank (segment_broadcast: grouped
//      ncclBroadcast, the other half).
// So a step is the data-parallel step of the whole optimizer (up to the order in which the clip
// norm's sum of squares is added: 1e-6 relative in the tests) and the parameters stay equal on
// every rank. Optimizers: Adam, AdamW and SGD (their states have their parameter's shape). On the
// MPI group each segment is all-reduced and broadcast in turn (no reduce of its own).
//
// Checkpoints hold the whole optimizer state, so that any world size (one process included)
// resumes: gather_state (every rank, at each checkpoint) fills rank 0's checkpoint with every
// parameter's state, and keep_owned (every rank, before io::restore) drops the other ranks' state
// from a checkpoint read in full. The training loop does both (TrainOptions::zero).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/distributed/data_parallel.h"
#include "core/graph/named_param.h"
#include "core/io/checkpoint.h"
#include "optim/optimizer.h"

namespace tessera {
namespace optim {

/// The rank that owns each parameter: the largest first, each to the least loaded rank by bytes
/// (ties: the lowest rank). The same on every rank.
std::vector<int> shard_owners(const std::vector<Tensor>& params, int world);

/// The parameters owned by `rank`, in order.
std::vector<Tensor> owned(const std::vector<Tensor>& params, const std::vector<int>& owners, int rank);

class ZeroUpdater : public ParamUpdater {
 public:
  /// `inner`: an Adam, AdamW or SGD optimizer over exactly this rank's parameters (owned(...), in
  /// order), with clipping off (ZeroUpdater clips: `clip_norm`, 0 = off). ValueError otherwise.
  ZeroUpdater(Optimizer& inner, std::vector<graph::NamedParam> params, std::shared_ptr<dist::ProcessGroup> group,
              double clip_norm = 0, int64_t bucket_bytes = dist::kBucketBytes,
              int64_t first_bytes = dist::kFirstBucketBytes);

  /// Every parameter (the step's), not only the owned ones.
  const std::vector<Tensor>& params() const override { return all_; }
  /// The owned parameters' state (inner's): what this rank holds.
  std::vector<Tensor> state() const override { return inner_.state(); }
  /// ValueError: a step updates every parameter together (update_all).
  std::vector<ParamWrite> update(size_t i, const Tensor& grad, const Tensor& lr, const Tensor& step) override;
  std::vector<ParamWrite> update_all(const std::vector<Tensor>& grads, const Tensor& lr, const Tensor& step) override;
  double lr() const override { return inner_.lr(); }
  int64_t step_count() const override { return inner_.step_count(); }
  void advance() override { inner_.advance(); }

  const std::vector<int>& owners() const { return owners_; }
  /// Bytes of optimizer state this rank holds, and all ranks together.
  int64_t state_bytes() const;
  int64_t total_state_bytes() const;

  /// Every rank, at a checkpoint: rank 0's `opt` part (captured from its own optimizer) gets every
  /// parameter's state, gathered from the owners by parameter path; the others' `opt` is unused.
  void gather_state(io::OptimizerState& opt) const;
  /// Every rank, before io::restore with its own optimizer: drops the state of the parameters
  /// this rank does not own from a checkpoint read in full.
  void keep_owned(io::OptimizerState& opt) const;

 private:
  Optimizer& inner_;
  std::vector<graph::NamedParam> named_;
  std::vector<Tensor> all_;
  std::shared_ptr<dist::ProcessGroup> group_;
  double clip_norm_;
  std::vector<int> owners_;
  std::vector<int> inner_index_;  // per parameter: its index in inner's params, -1 when not owned
  std::vector<dist::GradientBucket> buckets_;
  int first_ticket_ = 0;  // gradients: + bucket; parameters: + buckets + bucket; the clip norm: + 2 buckets
};

}  // namespace optim
}  // namespace tessera
