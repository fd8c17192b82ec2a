// Runs a planned Graph: inputs are copied into their buffers, then every node's kernel runs
// over arena offsets (views and in-place results share buffers as planned), then results that
// could not be written in place are copied into their parameters/state.
//
//   Executor ex(std::move(graph));
//   ex.run({{"x", x}, {"y", y}, {"lr", lr}, {"step", step}});
//   float loss = ex.fetch("loss").item<float>();
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "core/graph/planner.h"

namespace tessera {
namespace graph {

class Executor {
 public:
  /// Plans `g` and allocates its arena and input buffers (CPU).
  explicit Executor(Graph g);

  /// One run. Every graph input must be fed, with exactly the traced shape and dtype.
  void run(const std::map<std::string, Tensor>& feeds);
  /// A copy of the named output of the last run.
  Tensor fetch(const std::string& name) const;
  /// Random nodes draw from Philox block base + their random_offset in the following runs
  /// (Graph::random_blocks blocks in all, reserved by the caller from the step's generator).
  void set_random_base(uint64_t base);

  const Graph& graph() const { return graph_; }
  const MemoryPlan& plan() const { return plan_; }

 private:
  Tensor bind(int value);

  Graph graph_;
  MemoryPlan plan_;
  std::shared_ptr<Storage> arena_;
  std::vector<Tensor> buffers_;  // per value: a tensor over its planned bytes
  std::vector<std::vector<Tensor>> node_inputs_, node_outputs_;
};

}  // namespace graph
}  // namespace tessera
