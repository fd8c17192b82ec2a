// Tracing a training step into a Graph: the user's loss function runs once on symbolic
// tensors (shapes only), the autograd engine appends the backward ops using the same backward
// rules as eager mode, and the optimizer appends its update ops.
//
//   Graph g = trace_step(loss_fn, {{"x", x_meta}, {"y", y_meta}}, params, &optimizer);
//
// Parameters and optimizer state are recognized by identity: while tracing, their storage is
// detached (so they behave as symbolic tensors) and restored afterwards, whatever happens.
// Code that reads values (item(), to_vector()) inside the loss function fails with an error
// naming the tensor. Ops that draw random numbers (dropout) must draw from the generator passed
// as `rng`: the graph records where each draw lies in the step's share of that stream, and every
// run reserves a fresh share, so masks differ per step and match eager mode's draw for draw.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/graph/graph.h"
#include "core/graph/named_param.h"
#include "core/graph/updater.h"
#include "core/random.h"

namespace tessera {
namespace graph {

/// A loss function: symbolic inputs by name -> a one-element floating loss.
using LossFn = std::function<Tensor(const std::map<std::string, Tensor>&)>;

/// Traces forward, backward and (when `updater` is given) the update of one step. The graph's
/// outputs are "loss" and, without an updater, "grad/<name>" for each parameter that got one.
/// Inputs "lr" and "step" (0-d f64) are added when there is an updater. Random ops must draw
/// from `rng` (ValueError otherwise); the trace leaves rng's state as it found it and sets
/// Graph::random_blocks to what one step draws. Tensors passed to mark_output() by the loss
/// function become outputs too.
Graph trace_step(const LossFn& loss_fn, const std::vector<std::pair<std::string, TensorMeta>>& inputs,
                 const std::vector<NamedParam>& params, ParamUpdater* updater, Generator* rng = nullptr);

/// Inside a traced loss function: makes `t` a named output of the step (fetch it after a run,
/// e.g. an LSTM's final state to feed into the next step). Outside a trace (eager): nothing.
/// ValueError when the name is empty, "loss", starts with "grad/", or is marked twice.
void mark_output(const std::string& name, const Tensor& t);

/// Whether a step is being traced on this thread (inside trace_step's loss function, backward
/// or update): tensors made then are symbolic and hold no values.
bool tracing();

/// Begin/end of a recompute region in the active trace (no-ops when not tracing); prefer recompute().
void begin_recompute_region();
void end_recompute_region();

/// Marks the ops run by `fn` as a recompute region (activation checkpointing): in a traced
/// step their results are not kept for backward but recomputed from the region's inputs just
/// before the backward ops need them. In eager mode it simply runs fn.
///
///   Tensor h = recompute([&] { return block.forward(x); });
template <class F>
auto recompute(F&& fn) {
  struct Scope {
    Scope() { begin_recompute_region(); }
    ~Scope() { end_recompute_region(); }
  } scope;
  return fn();
}

}  // namespace graph
}  // namespace tessera
