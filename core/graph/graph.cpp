#include "core/graph/graph.h"

#include <map>
#include <sstream>

namespace tessera {
namespace graph {

const char* value_kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::input: return "input";
    case ValueKind::param: return "param";
    case ValueKind::state: return "state";
    case ValueKind::constant: return "constant";
    case ValueKind::intermediate: return "intermediate";
  }
  return "?";
}

namespace {
const char* phase_name(NodePhase p) {
  switch (p) {
    case NodePhase::forward: return "forward";
    case NodePhase::backward: return "backward";
    case NodePhase::update: return "update";
    case NodePhase::recompute: return "recompute";
  }
  return "?";
}
}  // namespace

int Graph::add_value(TensorMeta meta, ValueKind kind, std::string name, Tensor tensor) {
  Value v;
  v.id = static_cast<int>(values.size());
  v.meta = std::move(meta);
  v.kind = kind;
  v.name = std::move(name);
  v.tensor = std::move(tensor);
  values.push_back(std::move(v));
  return values.back().id;
}

int Graph::add_node(std::shared_ptr<const OpInstance> op, const std::vector<int>& inputs,
                    const std::vector<TensorMeta>& output_metas, NodePhase phase, int region) {
  OpNode n;
  n.op = std::move(op);
  n.inputs = inputs;
  n.phase = phase;
  n.region = region;
  const int index = static_cast<int>(nodes.size());
  for (size_t i = 0; i < output_metas.size(); ++i) {
    int id = add_value(output_metas[i], ValueKind::intermediate);
    values[id].producer = index;
    values[id].output_nr = static_cast<int>(i);
    n.outputs.push_back(id);
  }
  for (int in : inputs) values[in].consumers.push_back(index);
  nodes.push_back(std::move(n));
  return index;
}

void Graph::rebuild_consumers() {
  for (Value& v : values) v.consumers.clear();
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int in : nodes[i].inputs) values[in].consumers.push_back(static_cast<int>(i));
}

int Graph::find_input(const std::string& name) const {
  for (const Value& v : values)
    if (v.kind == ValueKind::input && v.name == name) return v.id;
  return -1;
}

int Graph::find_output(const std::string& name) const {
  for (const auto& [n, id] : outputs)
    if (n == name) return id;
  return -1;
}

std::string Graph::to_dot() const {
  std::ostringstream os;
  os << "digraph tessera {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n";
  // Sources that are not made by nodes: inputs, params, state, constants.
  for (const Value& v : values) {
    if (v.kind == ValueKind::intermediate || v.consumers.empty()) continue;
    os << "  v" << v.id << " [shape=ellipse, label=\"" << value_kind_name(v.kind) << (v.name.empty() ? "" : " ")
       << v.name << "\\n" << v.meta.dtype << v.meta.shape << "\"];\n";
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const OpNode& n = nodes[i];
    const char* color = n.phase == NodePhase::forward    ? "lightblue"
                        : n.phase == NodePhase::backward ? "lightpink"
                        : n.phase == NodePhase::update   ? "palegreen"
                                                         : "khaki";
    os << "  n" << i << " [shape=box, style=filled, fillcolor=" << color << ", label=\"" << n.op->name() << "\\n#" << i
       << " " << phase_name(n.phase) << "\"];\n";
    for (int in : n.inputs) {
      const Value& v = values[in];
      os << "  " << (v.producer >= 0 ? "n" + std::to_string(v.producer) : "v" + std::to_string(v.id)) << " -> n" << i
         << " [label=\"" << v.meta.shape << "\"];\n";
    }
  }
  for (const auto& [name, id] : outputs) {
    os << "  out_" << name << " [shape=ellipse, label=\"output " << name << "\"];\n";
    const Value& v = values[id];
    os << "  " << (v.producer >= 0 ? "n" + std::to_string(v.producer) : "v" + std::to_string(v.id)) << " -> out_"
       << name << ";\n";
  }
  os << "}\n";
  return os.str();
}

std::string Graph::summary() const {
  std::map<std::string, int> per_op;
  int per_phase[4] = {0, 0, 0, 0};
  for (const OpNode& n : nodes) {
    ++per_op[n.op->name()];
    ++per_phase[static_cast<int>(n.phase)];
  }
  int per_kind[5] = {0, 0, 0, 0, 0};
  for (const Value& v : values) ++per_kind[static_cast<int>(v.kind)];
  std::ostringstream os;
  os << nodes.size() << " nodes (" << per_phase[0] << " forward, " << per_phase[1] << " backward, " << per_phase[3]
     << " recompute, " << per_phase[2] << " update), " << values.size() << " values (" << per_kind[0] << " inputs, "
     << per_kind[1] << " params, " << per_kind[2] << " state, " << per_kind[3] << " constants, " << per_kind[4]
     << " intermediates)\nops:";
  for (const auto& [name, count] : per_op) os << " " << name << "×" << count;
  os << "\n";
  return os.str();
}

}  // namespace graph
}  // namespace tessera
