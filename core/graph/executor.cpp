#include "core/graph/executor.h"

#include <cstring>

namespace tessera {
namespace graph {

namespace {

Tensor over(const std::shared_ptr<Storage>& storage, size_t offset, const TensorMeta& meta) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage;
  impl->offset = offset;
  impl->meta = meta;
  return Tensor(impl);
}

}  // namespace

Executor::Executor(Graph g) : graph_(std::move(g)), plan_(plan_memory(graph_)) {
  for (const Value& v : graph_.values)
    TS_CHECK(v.meta.device.is_cpu(), NotImplementedError,
             "executor: value " << v.id << " is on " << v.meta.device << "; only CPU graphs run yet");
  arena_ = Storage::allocate(plan_.arena_bytes, Device::cpu());
  buffers_.resize(graph_.values.size());
  // Roots first (views and bound results refer to them), in id order: a view's base always
  // has a smaller id than the view.
  for (const Value& v : graph_.values) buffers_[v.id] = bind(v.id);
  for (const Node& n : graph_.nodes) {
    std::vector<Tensor> ins, outs;
    for (int in : n.inputs) ins.push_back(buffers_[in]);
    for (int out : n.outputs) outs.push_back(buffers_[out]);
    node_inputs_.push_back(std::move(ins));
    node_outputs_.push_back(std::move(outs));
  }
}

Tensor Executor::bind(int id) {
  const Value& v = graph_.values[id];
  switch (plan_.place[id]) {
    case MemoryPlan::Place::arena:
      return over(arena_, plan_.offset[id], v.meta);
    case MemoryPlan::Place::view: {
      const Tensor& base = buffers_[plan_.base[id]];
      return over(base.impl()->storage, base.impl()->offset + plan_.offset[id], v.meta);
    }
    case MemoryPlan::Place::bound: {
      const Tensor& target = graph_.values[plan_.base[id]].tensor;
      return over(target.impl()->storage, target.impl()->offset, v.meta);
    }
    case MemoryPlan::Place::output:
      return over(Storage::allocate(v.meta.nbytes(), v.meta.device), 0, v.meta);
    case MemoryPlan::Place::external:
      break;
  }
  switch (v.kind) {
    case ValueKind::input:
      return over(Storage::allocate(v.meta.nbytes(), v.meta.device), 0, v.meta);
    case ValueKind::param:
    case ValueKind::state:
    case ValueKind::constant:
      return over(v.tensor.impl()->storage, v.tensor.impl()->offset, v.meta);
    case ValueKind::intermediate:
      break;
  }
  TS_THROW(ValueError, "executor: value " << id << " has no planned place");
}

void Executor::run(const std::map<std::string, Tensor>& feeds) {
  for (const Value& v : graph_.values) {
    if (v.kind != ValueKind::input) continue;
    auto it = feeds.find(v.name);
    TS_CHECK(it != feeds.end(), ValueError, "compiled step: input '" << v.name << "' was not fed");
    TS_CHECK(it->second.dtype() == v.meta.dtype, DTypeError,
             "compiled step: input '" << v.name << "' is " << it->second.meta() << ", the step was compiled for "
                                      << v.meta);
    TS_CHECK(it->second.meta() == v.meta, ShapeError,
             "compiled step: input '" << v.name << "' is " << it->second.meta() << ", this plan expects " << v.meta);
    std::memcpy(buffers_[v.id].data_ptr(), it->second.data_ptr(), v.meta.nbytes());
  }
  for (const auto& [name, t] : feeds)
    TS_CHECK(graph_.find_input(name) >= 0, ValueError, "compiled step: '" << name << "' is not an input of this step");
  for (size_t i = 0; i < graph_.nodes.size(); ++i)
    if (!plan_.skip[i]) graph_.nodes[i].op->compute(node_inputs_[i], node_outputs_[i]);
  for (const WriteBack& w : plan_.copies)
    std::memcpy(buffers_[w.target].data_ptr(), buffers_[w.value].data_ptr(), graph_.values[w.value].meta.nbytes());
}

void Executor::set_random_base(uint64_t base) {
  for (Node& n : graph_.nodes)
    if (n.op->random() && n.op->random_stream().second != base + n.random_offset)
      n.op = n.op->with_random_start(base + n.random_offset);
}

Tensor Executor::fetch(const std::string& name) const {
  const int id = graph_.find_output(name);
  TS_CHECK(id >= 0, ValueError, "compiled step: no output named '" << name << "'");
  return buffers_[id].clone();
}

}  // namespace graph
}  // namespace tessera
