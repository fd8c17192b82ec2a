// compile(): a whole training step (forward, backward, optimizer update) traced once, planned,
// and replayed. The way trainers run by default.
//
//   AdamW opt(model.parameters(), AdamWOptions(1e-3));
//   auto loss_fn = [&](const std::map<std::string, Tensor>& in) {
//     return cross_entropy(model.forward(in.at("x")), in.at("y"));
//   };
//   CompiledStep step = compile(loss_fn, model.named_parameters(), &opt, {{"x", x}, {"y", y}});
//   for (...) {
//     opt.set_lr(schedule(step_no));               // no re-trace: lr and step are fed each run
//     double loss = step.run({{"x", x}, {"y", y}});  // updates the parameters in place
//   }
//
// Feeding inputs of new shapes traces and plans again; plans are cached per input shapes. When
// a module took another block layout since the step traced (layout_generation() in
// core/sparse/block_layout.h moved: BlockSparseLinear::set_layout), every plan is dropped and the
// next run traces again (on a GPU: a new plan, captured as a new CUDA graph from its second run).
// Input names and dtypes are fixed by the example inputs. The step runs where the parameters
// are (CPU or one GPU; on a GPU as a replayed CUDA graph, see executor.h); inputs may be fed
// from the CPU.
//
// Dropout: pass the generator the model's dropout draws from as `rng`. Each run reserves one
// step's share of its stream, so the masks change every step and equal those of the same step
// run eagerly from the same generator state (save rng's state in checkpoints to resume exactly).
// Extra outputs (an LSTM's final state, say): graph::mark_output(name, t) inside the loss
// function, fetch(name) after a run.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/graph/executor.h"
#include "core/graph/trace.h"
#include "core/graph/updater.h"

namespace tessera {

/// Where a compiled step's time goes, by op (CompiledStep::profile).
struct OpTime {
  std::string op;  ///< the op's name; "(write-backs)": results copied into parameters and state
  int nodes = 0;   ///< its nodes in the step's plan (skipped ones not counted)
  double ms = 0;   ///< their time together
};

/// One node of a profiled step (CompiledStep::profile's optional detail).
struct NodeTime {
  std::string op;         ///< the op's name
  std::string signature;  ///< its operands and results: "bf16[64, 256] f32[256] -> f32[64, 256]"
  double ms = 0;
};

class CompiledStep {
 public:
  CompiledStep(graph::LossFn loss_fn, std::vector<graph::NamedParam> params, ParamUpdater* updater,
               const std::map<std::string, Tensor>& example_inputs, Generator* rng = nullptr);

  /// One step: runs forward, backward and (with an updater) the update, and returns the loss.
  /// The updater's step count advances by one.
  double run(const std::map<std::string, Tensor>& inputs);
  /// The same step without waiting for it: on a GPU the host returns as soon as the work is
  /// queued (read the loss later with fetch("loss"), which waits). The inputs may be reused at once.
  void launch(const std::map<std::string, Tensor>& inputs);
  /// One step like run() (the same loss, updates and generator draws), run plainly and timed node
  /// by node (graph::Executor::run_profiled), summed by op, the most time first. Its sum is the
  /// step without CUDA-graph replay: on a GPU each node's kernels between events, so short
  /// kernels' times also hold the host's launch gaps. Run the step normally before (one-time set-up).
  ///   for (const OpTime& t : step.profile(inputs)) std::cout << t.op << " " << t.ms << "\n";
  /// With `nodes`, also every node run, in plan order, with its operands' and results' dtypes
  /// and shapes (format_profile_by_signature groups them).
  std::vector<OpTime> profile(const std::map<std::string, Tensor>& inputs, std::vector<NodeTime>* nodes = nullptr);
  /// Copy of a named output of the last run: "loss", a mark_output() name, or "grad/<param>"
  /// without an updater.
  Tensor fetch(const std::string& name) const;
  /// Whether the step has the output `name` (fetch() throws for one it has not).
  bool has_output(const std::string& name) const;

  /// The plan used by the last run (or built by the constructor).
  const graph::Executor& executor() const { return *current_; }
  size_t cached_plans() const { return plans_.size(); }
  std::string to_dot() const { return current_->graph().to_dot(); }
  /// Graph summary and memory plan of the current plan.
  std::string summary() const;

 private:
  graph::Executor& plan_for(const std::map<std::string, Tensor>& inputs);
  // The plan for the inputs (current_) and the run's feeds: the inputs, lr and step; the random base set.
  std::map<std::string, Tensor> prepare(const std::map<std::string, Tensor>& inputs);

  graph::LossFn loss_fn_;
  std::vector<graph::NamedParam> params_;
  ParamUpdater* updater_;
  Generator* rng_;
  std::map<std::string, DType> input_dtypes_;
  std::map<std::string, std::unique_ptr<graph::Executor>> plans_;  // by input shapes
  graph::Executor* current_ = nullptr;
  uint64_t layout_generation_ = 0;  // layout_generation() when plans_ were traced
};

/// A profile (CompiledStep::profile) as a table, a line per op, the most time first, then the sum:
///   op                              nodes         ms   share
///   lstm_recurrence_backward            1      5.088   38.1%
///   (sum)                             123     13.349  100.0%
std::string format_profile(const std::vector<OpTime>& times);

/// The nodes of a profile grouped by op and signature (equal dtypes and shapes), the most time
/// first, the first `rows` groups, with shares of all the nodes' time:
///   op                              nodes         ms   share  signature
///   cast                                2      0.262    2.1%  f32[16384, 4096] -> bf16[16384, 4096]
std::string format_profile_by_signature(const std::vector<NodeTime>& nodes, size_t rows);

/// Compiles a training step over `params` (named "0", "1", ... unless given names); `rng` is
/// the generator the loss function's random ops draw from (needed only when it has some).
CompiledStep compile(graph::LossFn loss_fn, const std::vector<Tensor>& params, ParamUpdater* updater,
                     const std::map<std::string, Tensor>& example_inputs, Generator* rng = nullptr);
CompiledStep compile(graph::LossFn loss_fn, std::vector<graph::NamedParam> params, ParamUpdater* updater,
                     const std::map<std::string, Tensor>& example_inputs, Generator* rng = nullptr);

}  // namespace tessera
