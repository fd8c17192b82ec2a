// A traced computation: a DAG of op applications over values, in topological order.
//
// Graphs are made by trace_step() (core/graph/trace.h) and run by an Executor after
// plan_memory() (core/graph/planner.h); most users only see compile() (core/graph/compile.h).
// Nodes are stored in execution order: forward nodes, then backward nodes, with each optimizer
// update placed right after the last node it must follow, and recomputation clones placed
// before the backward nodes that read them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/op.h"
#include "core/tensor.h"

namespace tessera {
namespace graph {

/// Where a value's data comes from.
enum class ValueKind {
  input,         ///< fed at every run (by name)
  param,         ///< a parameter: its own storage, updated in place by the optimizer
  state,         ///< optimizer state: its own storage, updated in place
  constant,      ///< a concrete tensor the traced code used (captured, read only)
  intermediate,  ///< made by a node: lives in the planned arena
};

const char* value_kind_name(ValueKind k);

struct Value {
  int id = -1;
  TensorMeta meta;
  ValueKind kind = ValueKind::intermediate;
  std::string name;          ///< inputs, params, state and named outputs
  int producer = -1;         ///< node index (intermediates)
  int output_nr = 0;
  Tensor tensor;             ///< params, state and constants: the tensor itself
  std::vector<int> consumers;  ///< node indices, in order (a node appears once per use)
};

/// Name of Graph::random_base's input value (reserved: no user input may have it).
inline constexpr const char* kRandomBaseInput = "random_base";

enum class NodePhase { forward, backward, update, recompute };

/// One recorded op of the graph (not the autograd tessera::Node of core/autograd.h: tracing a
/// backward walks those and records an OpNode for every rule it runs).
struct OpNode {
  std::shared_ptr<const OpInstance> op;
  std::vector<int> inputs;   ///< value ids
  std::vector<int> outputs;  ///< value ids
  NodePhase phase = NodePhase::forward;
  int region = -1;           ///< recompute region of a forward node (-1: none)
  /// Random ops: first Philox block of the draw relative to the run's base (see Graph::random_blocks);
  /// the op's `start` attribute, its last input being Graph::random_base.
  uint64_t random_offset = 0;
};

/// `value` replaces the contents of `target` (a param or state value) at the end of the step.
struct WriteBack {
  int target = -1;
  int value = -1;
};

class Graph {
 public:
  std::vector<Value> values;
  std::vector<OpNode> nodes;
  std::vector<WriteBack> writes;
  std::vector<std::pair<std::string, int>> outputs;  ///< named results fetched after a run
  /// Philox blocks one run draws from the step's generator: a run reserves them (base = the
  /// generator's offset) and each random node draws from base + its random_offset.
  uint64_t random_blocks = 0;
  /// The input every random node reads its Philox base from (i32[2], see OpBase::kRandom), -1
  /// when there are no random nodes. Named kRandomBaseInput; the executor writes it, not feeds.
  int random_base = -1;
  /// The generator's offset when traced: the base of runs for which none was set.
  uint64_t random_start = 0;

  int add_value(TensorMeta meta, ValueKind kind, std::string name = {}, Tensor tensor = {});
  /// Appends a node and its output values; returns the node index.
  int add_node(std::shared_ptr<const OpInstance> op, const std::vector<int>& inputs,
               const std::vector<TensorMeta>& output_metas, NodePhase phase, int region);
  /// Recomputes every value's consumer list from the nodes.
  void rebuild_consumers();

  /// Value id of the input/output named `name`, or -1.
  int find_input(const std::string& name) const;
  int find_output(const std::string& name) const;

  /// Graphviz text: one box per node (op name, phase), edges labelled with shapes.
  std::string to_dot() const;
  /// Counts of nodes per phase and per op, values per kind.
  std::string summary() const;
};

}  // namespace graph
}  // namespace tessera
