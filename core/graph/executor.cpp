#include "core/graph/executor.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/cuda/runtime.h"

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

// CUDA-graph capture unless TESSERA_CUDA_GRAPHS=0.
static bool cuda_graphs_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("TESSERA_CUDA_GRAPHS");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

Executor::Executor(Graph g) : graph_(std::move(g)), plan_(plan_memory(graph_)) {
  device_ = graph_.values.empty() ? Device::cpu() : graph_.values[0].meta.device;
  for (const Value& v : graph_.values) {
    if (v.meta.device == device_) continue;
    // name the value by what it is and the op that reads it (a constant has no name)
    const std::string read_by = v.consumers.empty() ? std::string("no op")
                                                    : graph_.nodes[static_cast<size_t>(v.consumers[0])].op->name();
    TS_THROW(DeviceError, "executor: " << value_kind_name(v.kind) << " value " << v.id
                                       << (v.name.empty() ? "" : " '" + v.name + "'") << " " << v.meta.dtype
                                       << v.meta.shape << ", read by " << read_by << ", is on " << v.meta.device
                                       << ", value 0 on " << device_
                                       << ": a compiled step runs on one device (move the model and its inputs there)");
  }
  capture_ = device_.is_cuda() && cuda_graphs_enabled();
  random_base_ = graph_.random_start;
  arena_ = Storage::allocate(plan_.arena_bytes, device_);
  buffers_.resize(graph_.values.size());
  // Roots first (views and bound results refer to them), in id order: a view's base always
  // has a smaller id than the view.
  for (const Value& v : graph_.values) buffers_[v.id] = bind(v.id);
  for (const OpNode& n : graph_.nodes) {
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

void Executor::feed(const std::map<std::string, Tensor>& feeds) {
  for (const Value& v : graph_.values) {
    if (v.kind != ValueKind::input || v.id == graph_.random_base) continue;
    auto it = feeds.find(v.name);
    TS_CHECK(it != feeds.end(), ValueError, "compiled step: input '" << v.name << "' was not fed");
    TS_CHECK(it->second.dtype() == v.meta.dtype, DTypeError,
             "compiled step: input '" << v.name << "' is " << it->second.meta() << ", the step was compiled for "
                                      << v.meta);
    TS_CHECK(it->second.shape() == v.meta.shape, ShapeError,
             "compiled step: input '" << v.name << "' is " << it->second.meta() << ", this plan expects " << v.meta);
    TS_CHECK(it->second.device().is_cpu() || it->second.device() == device_, DeviceError,
             "compiled step: input '" << v.name << "' is on " << it->second.device() << ", the step runs on "
                                      << device_);
    cuda::copy(buffers_[v.id].data_ptr(), device_, it->second.data_ptr(), it->second.device(), v.meta.nbytes());
  }
  for (const auto& [name, t] : feeds)
    TS_CHECK(graph_.find_input(name) >= 0 && graph_.find_input(name) != graph_.random_base, ValueError,
             "compiled step: '" << name << "' is not an input of this step");
  if (graph_.random_base >= 0) {
    // The run's Philox base as {low, high} words (Dropout's base input), ordered before the
    // nodes on the stream like the feeds: replays of a captured graph read it on the device.
    const uint32_t words[2] = {static_cast<uint32_t>(random_base_), static_cast<uint32_t>(random_base_ >> 32)};
    cuda::copy(buffers_[graph_.random_base].data_ptr(), device_, words, Device::cpu(), sizeof words);
  }
}

void Executor::run(const std::map<std::string, Tensor>& feeds) {
  feed(feeds);
  if (cuda_graph_) return cuda::launch_graph(cuda_graph_, device_.index);
  if (capture_ && plain_runs_ > 0) {
    cuda::begin_capture(device_.index);
    try {
      run_nodes();
    } catch (...) {
      try {
        cuda::end_capture(device_.index);
      } catch (...) {
      }
      capture_ = false;  // run plainly from now on
      throw;
    }
    cuda_graph_ = cuda::end_capture(device_.index);
    return cuda::launch_graph(cuda_graph_, device_.index);
  }
  run_nodes();
  ++plain_runs_;
}

void Executor::run_nodes() {
  for (size_t i = 0; i < graph_.nodes.size(); ++i)
    if (!plan_.skip[i]) graph_.nodes[i].op->compute(node_inputs_[i], node_outputs_[i]);
  for (const WriteBack& w : plan_.copies)
    cuda::copy(buffers_[w.target].data_ptr(), device_, buffers_[w.value].data_ptr(), device_,
               graph_.values[w.value].meta.nbytes());
}

void Executor::run_profiled(const std::map<std::string, Tensor>& feeds, std::vector<double>* node_ms) {
  feed(feeds);
  const size_t n = graph_.nodes.size();
  node_ms->assign(n + 1, 0.0);
  if (device_.is_cuda()) {
    // an event before every node and after the last, all queued first, then read
    std::vector<std::shared_ptr<void>> at(n + 2);
    for (size_t i = 0; i < n; ++i) {
      at[i] = cuda::record_event(device_.index);
      if (!plan_.skip[i]) graph_.nodes[i].op->compute(node_inputs_[i], node_outputs_[i]);
    }
    at[n] = cuda::record_event(device_.index);
    for (const WriteBack& w : plan_.copies)
      cuda::copy(buffers_[w.target].data_ptr(), device_, buffers_[w.value].data_ptr(), device_,
                 graph_.values[w.value].meta.nbytes());
    at[n + 1] = cuda::record_event(device_.index);
    for (size_t i = 0; i <= n; ++i) (*node_ms)[i] = cuda::event_ms(at[i], at[i + 1]);
  } else {
    using Clock = std::chrono::steady_clock;
    auto ms_since = [](Clock::time_point t0) {
      return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    };
    for (size_t i = 0; i < n; ++i) {
      if (plan_.skip[i]) continue;
      const Clock::time_point t0 = Clock::now();
      graph_.nodes[i].op->compute(node_inputs_[i], node_outputs_[i]);
      (*node_ms)[i] = ms_since(t0);
    }
    const Clock::time_point t0 = Clock::now();
    for (const WriteBack& w : plan_.copies)
      cuda::copy(buffers_[w.target].data_ptr(), device_, buffers_[w.value].data_ptr(), device_,
                 graph_.values[w.value].meta.nbytes());
    (*node_ms)[n] = ms_since(t0);
  }
  for (size_t i = 0; i < n; ++i)
    if (plan_.skip[i]) (*node_ms)[i] = 0.0;
  ++plain_runs_;
}

void Executor::set_random_base(uint64_t base) { random_base_ = base; }

Tensor Executor::fetch(const std::string& name) const {
  const int id = graph_.find_output(name);
  TS_CHECK(id >= 0, ValueError, "compiled step: no output named '" << name << "'");
  return buffers_[id].clone();
}

}  // namespace graph
}  // namespace tessera
