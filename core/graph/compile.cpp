#include "core/graph/compile.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/sparse/block_layout.h"

namespace tessera {

CompiledStep::CompiledStep(graph::LossFn loss_fn, std::vector<graph::NamedParam> params, ParamUpdater* updater,
                           const std::map<std::string, Tensor>& example_inputs, Generator* rng)
    : loss_fn_(std::move(loss_fn)), params_(std::move(params)), updater_(updater), rng_(rng) {
  for (const auto& [name, t] : example_inputs) {
    TS_CHECK(t.defined(), ValueError, "compile: example input '" << name << "' is undefined");
    TS_CHECK(name != "lr" && name != "step", ValueError,
             "compile: '" << name << "' is reserved for the optimizer's learning rate and step number");
    TS_CHECK(name != graph::kRandomBaseInput, ValueError,
             "compile: '" << name << "' is reserved for the random ops' Philox base");
    input_dtypes_[name] = t.dtype();
  }
  current_ = &plan_for(example_inputs);
}

graph::Executor& CompiledStep::plan_for(const std::map<std::string, Tensor>& inputs) {
  // A module took another layout since these plans were traced: their ops hold the old one.
  if (layout_generation() != layout_generation_) {
    plans_.clear();
    current_ = nullptr;
    layout_generation_ = layout_generation();
  }
  std::ostringstream key;
  std::vector<std::pair<std::string, TensorMeta>> metas;
  for (const auto& [name, dtype] : input_dtypes_) {
    auto it = inputs.find(name);
    TS_CHECK(it != inputs.end() && it->second.defined(), ValueError, "compiled step: input '" << name << "' is missing");
    TS_CHECK(it->second.dtype() == dtype, DTypeError,
             "compiled step: input '" << name << "' is " << it->second.meta() << ", but the step was compiled for "
                                      << dtype);
    key << name << ':' << it->second.shape() << ';';
    // Traced on the parameters' device: CPU feeds are copied there at every run.
    TensorMeta m = it->second.meta();
    m.device = params_.empty() ? m.device : params_[0].tensor.device();
    metas.push_back({name, m});
  }
  for (const auto& [name, t] : inputs)
    TS_CHECK(input_dtypes_.count(name), ValueError, "compiled step: '" << name << "' is not an input of this step");
  auto& slot = plans_[key.str()];
  if (!slot) {
    try {
      slot = std::make_unique<graph::Executor>(graph::trace_step(loss_fn_, metas, params_, updater_, rng_));
    } catch (...) {
      plans_.erase(key.str());
      throw;
    }
  }
  return *slot;
}

double CompiledStep::run(const std::map<std::string, Tensor>& inputs) {
  launch(inputs);
  return fetch("loss").item<double>();
}

std::map<std::string, Tensor> CompiledStep::prepare(const std::map<std::string, Tensor>& inputs) {
  current_ = &plan_for(inputs);
  std::map<std::string, Tensor> feeds = inputs;
  if (updater_) {
    feeds["lr"] = full({}, updater_->lr(), DType::f64);
    feeds["step"] = full({}, static_cast<double>(updater_->step_count() + 1), DType::f64);
  }
  if (const uint64_t blocks = current_->graph().random_blocks) current_->set_random_base(rng_->reserve_whole(blocks));
  return feeds;
}

void CompiledStep::launch(const std::map<std::string, Tensor>& inputs) {
  const std::map<std::string, Tensor> feeds = prepare(inputs);  // sets current_: before the call names it
  current_->run(feeds);
  if (updater_) updater_->advance();
}

namespace {

// "bf16[64, 256] f32[256] -> f32[64, 256]": a node's operands, then its results; of more than
// six, the first four and the count of the rest ("f32[64] f32[64] f32[64] f32[8, 32, 32] +92
// more": the optimizer's multi-tensor updates)
std::string node_signature(const graph::Graph& g, const graph::OpNode& n) {
  std::ostringstream os;
  auto list = [&](const std::vector<int>& ids) {
    const size_t shown = ids.size() > 6 ? 4 : ids.size();
    for (size_t k = 0; k < ids.size(); ++k) {
      if (k == shown) {
        os << " +" << ids.size() - shown << " more";
        break;
      }
      if (k) os << " ";
      if (ids[k] < 0) {
        os << "-";
        continue;
      }
      const TensorMeta& m = g.values[ids[k]].meta;
      os << dtype_name(m.dtype) << m.shape.str();
    }
  };
  list(n.inputs);
  os << " -> ";
  list(n.outputs);
  return os.str();
}

}  // namespace

std::vector<OpTime> CompiledStep::profile(const std::map<std::string, Tensor>& inputs, std::vector<NodeTime>* nodes) {
  const std::map<std::string, Tensor> feeds = prepare(inputs);
  std::vector<double> node_ms;
  current_->run_profiled(feeds, &node_ms);
  if (updater_) updater_->advance();
  const graph::Graph& g = current_->graph();
  std::map<std::string, OpTime> by_op;
  if (nodes) nodes->clear();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (current_->plan().skip[i]) continue;
    OpTime& t = by_op[g.nodes[i].op->name()];
    t.op = g.nodes[i].op->name();
    ++t.nodes;
    t.ms += node_ms[i];
    if (nodes) nodes->push_back({t.op, node_signature(g, g.nodes[i]), node_ms[i]});
  }
  std::vector<OpTime> out;
  for (const auto& [name, t] : by_op) out.push_back(t);
  if (!current_->plan().copies.empty())
    out.push_back({"(write-backs)", static_cast<int>(current_->plan().copies.size()), node_ms[g.nodes.size()]});
  std::stable_sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return out;
}

std::string format_profile(const std::vector<OpTime>& times) {
  double total = 0;
  int nodes = 0;
  for (const OpTime& t : times) total += t.ms, nodes += t.nodes;
  std::ostringstream out;
  auto row = [&](const std::string& op, int n, double ms) {
    char line[160];
    std::snprintf(line, sizeof(line), "  %-32s %5d %10.3f %6.1f%%\n", op.c_str(), n, ms,
                  total > 0 ? 100.0 * ms / total : 0.0);
    out << line;
  };
  char head[160];
  std::snprintf(head, sizeof(head), "  %-32s %5s %10s %7s\n", "op", "nodes", "ms", "share");
  out << head;
  for (const OpTime& t : times) row(t.op, t.nodes, t.ms);
  row("(sum)", nodes, total);
  return out.str();
}

std::string format_profile_by_signature(const std::vector<NodeTime>& nodes, size_t rows) {
  struct Group {
    std::string op, signature;
    int nodes = 0;
    double ms = 0;
  };
  std::map<std::pair<std::string, std::string>, Group> groups;
  double total = 0;
  for (const NodeTime& n : nodes) {
    Group& gr = groups[{n.op, n.signature}];
    gr.op = n.op, gr.signature = n.signature;
    ++gr.nodes;
    gr.ms += n.ms;
    total += n.ms;
  }
  std::vector<Group> sorted;
  for (auto& [key, gr] : groups) sorted.push_back(std::move(gr));
  std::stable_sort(sorted.begin(), sorted.end(), [](const Group& a, const Group& b) { return a.ms > b.ms; });
  std::ostringstream out;
  char line[160];
  std::snprintf(line, sizeof(line), "  %-32s %5s %10s %7s  %s\n", "op", "nodes", "ms", "share", "signature");
  out << line;
  for (size_t i = 0; i < sorted.size() && i < rows; ++i) {
    const Group& gr = sorted[i];
    std::snprintf(line, sizeof(line), "  %-32s %5d %10.3f %6.1f%%  ", gr.op.c_str(), gr.nodes, gr.ms,
                  total > 0 ? 100.0 * gr.ms / total : 0.0);
    out << line << gr.signature << "\n";
  }
  return out.str();
}

Tensor CompiledStep::fetch(const std::string& name) const { return current_->fetch(name); }

bool CompiledStep::has_output(const std::string& name) const { return current_->graph().find_output(name) >= 0; }

std::string CompiledStep::summary() const {
  return current_->graph().summary() + "memory: " + current_->plan().summary() + "\n";
}

CompiledStep compile(graph::LossFn loss_fn, const std::vector<Tensor>& params, ParamUpdater* updater,
                     const std::map<std::string, Tensor>& example_inputs, Generator* rng) {
  std::vector<graph::NamedParam> named;
  for (size_t i = 0; i < params.size(); ++i) named.push_back({std::to_string(i), params[i]});
  return CompiledStep(std::move(loss_fn), std::move(named), updater, example_inputs, rng);
}

CompiledStep compile(graph::LossFn loss_fn, std::vector<graph::NamedParam> params, ParamUpdater* updater,
                     const std::map<std::string, Tensor>& example_inputs, Generator* rng) {
  return CompiledStep(std::move(loss_fn), std::move(params), updater, example_inputs, rng);
}

}  // namespace tessera
