#include "core/graph/trace.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "core/autograd.h"
#include "core/random.h"

namespace tessera {
namespace graph {

namespace {

// Records every op into a Graph, mapping tensor impls to value ids. Keeps every mapped impl
// alive so that no address is reused for another tensor during the trace.
class GraphTracer final : public Tracer {
 public:
  explicit GraphTracer(Graph& g) : g_(g) {}

  bool symbolic() const override { return true; }

  void bind(const Tensor& t, int id) {
    ids_[t.impl()] = id;
    keep_.push_back(t.impl_ptr());
  }

  int find(const Tensor& t) const {
    auto it = ids_.find(t.impl());
    return it == ids_.end() ? -1 : it->second;
  }

  int lookup(const Tensor& t, const char* op) {
    int id = find(t);
    if (id >= 0) return id;
    TS_CHECK(!t.is_symbolic(), ValueError,
             op << ": got symbolic tensor " << t.meta()
                << " that this trace did not make (from another trace, or made with symbolic() inside the loss function)");
    id = g_.add_value(t.meta(), ValueKind::constant, "", t);  // a concrete tensor the code used
    bind(t, id);
    return id;
  }

  void record(const std::shared_ptr<const OpInstance>& op, const std::vector<Tensor>& inputs,
              const std::vector<Tensor>& outputs) override {
    uint64_t random_offset = 0;
    if (op->random()) {
      TS_CHECK(rng_, ValueError,
               op->name() << " inside a compiled step needs the generator it draws from: pass it as compile()'s "
                             "rng argument (else its random numbers would repeat at every step)");
      const auto [seed, start] = op->random_stream();
      TS_CHECK(seed == rng_->seed() && start >= rng_start_, ValueError,
               op->name() << " draws from Philox stream (seed " << seed << ", block " << start
                          << "), not from the compiled step's rng (seed " << rng_->seed() << ", block " << rng_start_
                          << " on): pass the generator it uses as compile()'s rng");
      random_offset = start - rng_start_;
    }
    std::vector<int> ins;
    for (const Tensor& t : inputs) ins.push_back(lookup(t, op->name()));
    std::shared_ptr<const OpInstance> node_op = op;
    if (op->random()) {
      // The node draws from block random_offset past the run's base, which it reads from the
      // graph's Philox-base input (written by the executor each run): its arguments stay fixed.
      node_op = op->with_random_start(random_offset);
      ins.push_back(random_base(detail::kernel_device(inputs, outputs)));
      std::vector<TensorMeta> in_metas;
      for (int id : ins) in_metas.push_back(g_.values[id].meta);
      node_op->infer(in_metas);  // the op takes the base input (an op given one already fails here)
    }
    std::vector<TensorMeta> metas;
    for (const Tensor& t : outputs) metas.push_back(t.meta());
    const int n = g_.add_node(node_op, ins, metas, phase_, phase_ == NodePhase::forward ? region_ : -1);
    g_.nodes[n].random_offset = random_offset;
    for (size_t i = 0; i < outputs.size(); ++i) bind(outputs[i], g_.nodes[n].outputs[i]);
  }

  void alias(const Tensor& alias, const Tensor& of) override {
    int id = find(of);
    if (id >= 0) bind(alias, id);
  }

  /// Random ops must draw from `rng` at or after its current offset.
  void set_rng(const Generator* rng) {
    rng_ = rng;
    rng_start_ = rng ? rng->offset() : 0;
  }

  void mark_output(const std::string& name, const Tensor& t) {
    TS_CHECK(t.defined(), ValueError, "mark_output: '" << name << "' is an undefined tensor");
    TS_CHECK(!name.empty() && name != "loss" && name.rfind("grad/", 0) != 0, ValueError,
             "mark_output: the name '" << name << "' is reserved (\"loss\", \"grad/...\") or empty");
    TS_CHECK(g_.find_output(name) < 0, ValueError, "mark_output: '" << name << "' is marked twice");
    g_.outputs.push_back({name, lookup(t, "mark_output")});
  }

  /// The graph's Philox-base input (made on first use, on the random ops' device).
  int random_base(Device device) {
    if (g_.random_base < 0) {
      TS_CHECK(g_.find_input(kRandomBaseInput) < 0, ValueError,
               "compile: the input name '" << kRandomBaseInput << "' is reserved for the random ops' Philox base");
      g_.random_base = g_.add_value({Shape{2}, DType::i32, device}, ValueKind::input, kRandomBaseInput);
    }
    const Device at = g_.values[g_.random_base].meta.device;
    TS_CHECK(at == device, DeviceError,
             "compile: random ops on " << at << " and " << device << ": a compiled step runs on one device");
    return g_.random_base;
  }

  void set_phase(NodePhase p) { phase_ = p; }
  void begin_region() {
    TS_CHECK(region_ < 0, ValueError, "recompute regions cannot be nested");
    region_ = next_region_++;
  }
  void end_region() { region_ = -1; }

 private:
  Graph& g_;
  std::unordered_map<const TensorImpl*, int> ids_;
  std::vector<std::shared_ptr<TensorImpl>> keep_;
  const Generator* rng_ = nullptr;
  uint64_t rng_start_ = 0;
  NodePhase phase_ = NodePhase::forward;
  int region_ = -1;
  int next_region_ = 0;
};

thread_local GraphTracer* g_active = nullptr;

// Makes parameters and state symbolic for the trace (storage detached, no grad) and puts
// everything back on destruction, also when the loss function throws.
class DetachedStorage {
 public:
  void detach(const Tensor& t, bool requires_grad) {
    TensorImpl* impl = t.impl();
    saved_.push_back({t.impl_ptr(), impl->storage, impl->offset, impl->grad, impl->requires_grad});
    impl->storage.reset();
    impl->offset = 0;
    impl->grad.reset();
    impl->requires_grad = requires_grad;
  }
  ~DetachedStorage() {
    for (Saved& s : saved_) {
      s.impl->storage = s.storage;
      s.impl->offset = s.offset;
      s.impl->grad = s.grad;
      s.impl->requires_grad = s.requires_grad;
    }
  }

 private:
  struct Saved {
    std::shared_ptr<TensorImpl> impl;
    std::shared_ptr<Storage> storage;
    size_t offset;
    std::shared_ptr<TensorImpl> grad;
    bool requires_grad;
  };
  std::vector<Saved> saved_;
};

class TracerInstall {
 public:
  explicit TracerInstall(GraphTracer* t) : prev_(set_current_tracer(t)), prev_active_(g_active) { g_active = t; }
  ~TracerInstall() {
    set_current_tracer(prev_);
    g_active = prev_active_;
  }

 private:
  Tracer* prev_;
  GraphTracer* prev_active_;
};

// After nodes moved: producers and consumers follow the new order.
void renumber(Graph& g) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (size_t k = 0; k < g.nodes[i].outputs.size(); ++k) {
      g.values[g.nodes[i].outputs[k]].producer = static_cast<int>(i);
      g.values[g.nodes[i].outputs[k]].output_nr = static_cast<int>(k);
    }
  g.rebuild_consumers();
}

// Activation checkpointing: the forward nodes of each region are cloned just before the first
// non-forward node that reads one of their results, and those readers are pointed at the clones.
// The originals' results then die within the forward pass.
void apply_recompute(Graph& g) {
  std::set<int> regions;
  for (const OpNode& n : g.nodes)
    if (n.region >= 0) regions.insert(n.region);
  for (int r : regions) {
    std::vector<int> members;
    std::set<int> produced;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i].phase == NodePhase::forward && g.nodes[i].region == r) {
        members.push_back(static_cast<int>(i));
        produced.insert(g.nodes[i].outputs.begin(), g.nodes[i].outputs.end());
      }
    int first_reader = -1;
    for (size_t i = 0; i < g.nodes.size() && first_reader < 0; ++i) {
      if (g.nodes[i].phase == NodePhase::forward) continue;
      for (int in : g.nodes[i].inputs)
        if (produced.count(in)) first_reader = static_cast<int>(i);
    }
    if (first_reader < 0) continue;

    std::unordered_map<int, int> clone_of;  // original value -> recomputed value
    std::vector<OpNode> clones;
    for (int m : members) {
      OpNode c = g.nodes[m];
      c.phase = NodePhase::recompute;
      c.region = -1;
      for (int& in : c.inputs)
        if (auto it = clone_of.find(in); it != clone_of.end()) in = it->second;
      for (int& out : c.outputs) {
        int id = g.add_value(g.values[out].meta, ValueKind::intermediate);
        clone_of[out] = id;
        out = id;
      }
      clones.push_back(std::move(c));
    }
    for (size_t i = first_reader; i < g.nodes.size(); ++i)
      for (int& in : g.nodes[i].inputs)
        if (auto it = clone_of.find(in); it != clone_of.end()) in = it->second;
    for (auto& w : g.writes)
      if (auto it = clone_of.find(w.value); it != clone_of.end()) w.value = it->second;
    g.nodes.insert(g.nodes.begin() + first_reader, clones.begin(), clones.end());
  }
  renumber(g);
}

// Moves each update node to just after the last node it must follow: the producers of its
// inputs (the final gradient, or an earlier update node, once that one is placed) and every
// other reader of the parameters/state it overwrites. Gradients and optimizer temporaries then
// die as soon as they are used, instead of all living until the end of the step. A joining node
// (OpBase::kJoin: the wait for a gradient all-reduce) goes after the last backward node, so that
// the reduction it waits for, started right after its gradients, overlaps the rest of backward.
// The computation is unchanged (same ops, same inputs).
void schedule_updates(Graph& g) {
  const int nn = static_cast<int>(g.nodes.size());
  std::vector<std::vector<int>> targets_of(nn);  // update node -> values it overwrites
  for (const WriteBack& w : g.writes)
    if (g.values[w.value].producer >= 0) targets_of[g.values[w.value].producer].push_back(w.target);
  int last_backward = -1;  // the last node that is not an update
  for (int i = 0; i < nn; ++i)
    if (g.nodes[i].phase != NodePhase::update) last_backward = i;
  std::vector<int> ready_after(nn, -1);
  for (int u = 0; u < nn; ++u) {  // trace order is topological: an update's producers come first
    if (g.nodes[u].phase != NodePhase::update) continue;
    int after = -1;
    for (int in : g.nodes[u].inputs) {
      const int p = g.values[in].producer;
      if (p < 0) continue;
      // after another update: in its slot (due lists keep trace order), else after the producer
      after = std::max(after, g.nodes[p].phase == NodePhase::update ? ready_after[p] : p);
    }
    for (int t : targets_of[u])
      for (int c : g.values[t].consumers)
        if (g.nodes[c].phase != NodePhase::update) after = std::max(after, c);
    if (g.nodes[u].op->joins()) after = std::max(after, last_backward);
    ready_after[u] = after;
  }
  std::vector<OpNode> order;
  std::vector<std::vector<int>> due(nn + 1);
  for (int u = 0; u < nn; ++u)
    if (g.nodes[u].phase == NodePhase::update) due[std::max(0, std::min(ready_after[u], nn))].push_back(u);
  for (int u : due[0])
    if (ready_after[u] < 0) order.push_back(g.nodes[u]);
  for (int i = 0; i < nn; ++i) {
    if (g.nodes[i].phase == NodePhase::update) continue;
    order.push_back(g.nodes[i]);
    for (int u : due[i])
      if (ready_after[u] >= 0) order.push_back(g.nodes[u]);
  }
  for (int u : due[nn]) order.push_back(g.nodes[u]);
  g.nodes = std::move(order);
  renumber(g);
}

}  // namespace

void begin_recompute_region() {
  if (g_active) g_active->begin_region();
}

void end_recompute_region() {
  if (g_active) g_active->end_region();
}

void mark_output(const std::string& name, const Tensor& t) {
  if (g_active) g_active->mark_output(name, t);
}

bool tracing() { return g_active != nullptr; }

Graph trace_step(const LossFn& loss_fn, const std::vector<std::pair<std::string, TensorMeta>>& inputs,
                 const std::vector<NamedParam>& params, ParamUpdater* updater, Generator* rng) {
  Graph g;
  GraphTracer tracer(g);
  // The trace draws nothing: the generator is put back however the trace ends.
  struct RngRestore {
    Generator* rng;
    Generator::State state;
    ~RngRestore() {
      if (rng) rng->set_state(state);
    }
  } rng_restore{rng, rng ? rng->state() : Generator::State{}};
  tracer.set_rng(rng);

  std::map<std::string, Tensor> feeds;
  for (const auto& [name, meta] : inputs) {
    TS_CHECK(!feeds.count(name), ValueError, "compile: input '" << name << "' is given twice");
    Tensor t = symbolic(meta.shape, meta.dtype, meta.device);
    tracer.bind(t, g.add_value(meta, ValueKind::input, name));
    feeds[name] = t;
  }

  DetachedStorage detached;  // restores params and state when this function returns or throws
  std::set<const TensorImpl*> seen;
  for (const NamedParam& p : params) {
    TS_CHECK(p.tensor.defined() && p.tensor.is_leaf() && is_floating(p.tensor.dtype()), ValueError,
             "compile: parameter '" << p.name << "' must be a floating leaf tensor");
    TS_CHECK(seen.insert(p.tensor.impl()).second, ValueError, "compile: parameter '" << p.name << "' is listed twice");
    tracer.bind(p.tensor, g.add_value(p.tensor.meta(), ValueKind::param, p.name, p.tensor));
  }
  std::vector<Tensor> state = updater ? updater->state() : std::vector<Tensor>{};
  for (size_t i = 0; i < state.size(); ++i)
    tracer.bind(state[i], g.add_value(state[i].meta(), ValueKind::state, "state/" + std::to_string(i), state[i]));
  for (const NamedParam& p : params) detached.detach(p.tensor, /*requires_grad=*/true);
  for (const Tensor& s : state) detached.detach(s, /*requires_grad=*/false);

  TracerInstall install(&tracer);
  struct GradOn {
    bool prev = GradMode::is_enabled();
    GradOn() { GradMode::set_enabled(true); }
    ~GradOn() { GradMode::set_enabled(prev); }
  } grad_on;

  // Forward.
  Tensor loss = loss_fn(feeds);
  TS_CHECK(loss.defined() && loss.numel() == 1 && is_floating(loss.dtype()), ShapeError,
           "compile: the loss function must return a one-element floating tensor, got "
               << (loss.defined() ? loss.meta().str() : std::string("an undefined tensor")));
  g.outputs.push_back({"loss", tracer.lookup(loss, "loss")});

  // Backward: the eager engine walks the recorded autograd nodes; every rule it runs is traced.
  tracer.set_phase(NodePhase::backward);
  if (loss.requires_grad()) loss.backward();
  std::vector<Tensor> grads;
  for (const NamedParam& p : params) grads.push_back(p.tensor.grad());

  // Update.
  if (updater) {
    tracer.set_phase(NodePhase::update);
    NoGradGuard no_grad;
    // On the parameters' device: the update kernels read them there (no host round trip).
    const Device where = params.empty() ? Device::cpu() : params[0].tensor.device();
    Tensor lr = symbolic({}, DType::f64, where), step = symbolic({}, DType::f64, where);
    tracer.bind(lr, g.add_value(lr.meta(), ValueKind::input, "lr"));
    tracer.bind(step, g.add_value(step.meta(), ValueKind::input, "step"));
    // The gradients in the updater's parameter order (undefined where there is none), so that an
    // update over all of them (global-norm clipping) sees every gradient of the step.
    const std::vector<Tensor>& up = updater->params();
    std::vector<Tensor> update_grads(up.size());
    for (size_t i = 0; i < params.size(); ++i) {
      if (!grads[i].defined()) continue;
      auto it = std::find_if(up.begin(), up.end(), [&](const Tensor& t) { return t.same(params[i].tensor); });
      TS_CHECK(it != up.end(), ValueError, "compile: parameter '" << params[i].name << "' is not one of the optimizer's");
      update_grads[static_cast<size_t>(it - up.begin())] = grads[i];
    }
    for (const ParamWrite& w : updater->update_all(update_grads, lr, step)) {
      const int target = tracer.find(w.target);
      TS_CHECK(target >= 0 && (g.values[target].kind == ValueKind::param || g.values[target].kind == ValueKind::state),
               ValueError, "compile: an optimizer update writes a tensor that is neither a parameter nor its state");
      g.writes.push_back({target, tracer.lookup(w.value, "update")});
    }
  } else {
    for (size_t i = 0; i < params.size(); ++i)
      if (grads[i].defined()) g.outputs.push_back({"grad/" + params[i].name, tracer.lookup(grads[i], "grad")});
  }

  if (rng) {
    g.random_start = rng_restore.state.offset;
    g.random_blocks = rng->offset() - rng_restore.state.offset;
    for (const OpNode& n : g.nodes)
      TS_CHECK(!n.op->random() || n.random_offset <= g.random_blocks, ValueError,
               "compile: " << n.op->name() << " draws from block " << rng_restore.state.offset + n.random_offset
                           << " of the rng, past the " << g.random_blocks << " blocks this step reserved");
  }
  apply_recompute(g);
  schedule_updates(g);
  return g;
}

}  // namespace graph
}  // namespace tessera
