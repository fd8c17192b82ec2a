// Runs a planned Graph: inputs are copied into their buffers, then every node's kernel runs
// over arena offsets (views and in-place results share buffers as planned), then results that
// could not be written in place are copied into their parameters/state.
//
// A graph runs on one device: the arena and input buffers are allocated there, and feeds may
// come from the CPU or that device (copied in). On CUDA the node loop and the write-backs are
// captured once as a CUDA graph (on the second run: the first one runs the kernels plainly, so
// that one-time set-up such as cuBLAS handles and layout tables happens outside the capture) and
// replayed afterwards. Random nodes (dropout) read their Philox base from a device input that
// each run writes (set_random_base) before the nodes or the replay, so their draws move every
// run while the captured kernels' arguments stay the same. TESSERA_CUDA_GRAPHS=0 switches
// capture off.
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
  /// One run as run() does it (the same results and updates), but plain, never a CUDA graph, and
  /// timed node by node: node_ms[i] is node i's time in ms (0 for a node the plan skips), and
  /// node_ms[nodes] the write-backs'. On CUDA the GPU time between events recorded around each
  /// node (short kernels also count the host's launch gaps); on the CPU the wall clock. Run the
  /// step normally first: a first run also does one-time set-up (library handles, tables).
  void run_profiled(const std::map<std::string, Tensor>& feeds, std::vector<double>* node_ms);
  /// A copy of the named output of the last run.
  Tensor fetch(const std::string& name) const;
  /// Random nodes draw from Philox block base + their random_offset in the following runs
  /// (Graph::random_blocks blocks in all, reserved by the caller from the step's generator).
  /// Until it is called they draw from Graph::random_start, the blocks the trace saw.
  void set_random_base(uint64_t base);

  const Graph& graph() const { return graph_; }
  const MemoryPlan& plan() const { return plan_; }
  /// The device the step runs on.
  Device device() const { return device_; }
  /// Whether runs replay a captured CUDA graph now.
  bool replays_cuda_graph() const { return cuda_graph_ != nullptr; }

 private:
  Tensor bind(int value);
  void feed(const std::map<std::string, Tensor>& feeds);  // the inputs and the random base, checked
  void run_nodes();  // the node loop and the write-backs

  Graph graph_;
  Device device_;
  bool capture_ = false;           // CUDA, not switched off
  int plain_runs_ = 0;
  uint64_t random_base_ = 0;       // written into Graph::random_base at every run
  std::shared_ptr<void> cuda_graph_;
  MemoryPlan plan_;
  std::shared_ptr<Storage> arena_;
  std::vector<Tensor> buffers_;  // per value: a tensor over its planned bytes
  std::vector<std::vector<Tensor>> node_inputs_, node_outputs_;
};

}  // namespace graph
}  // namespace tessera
