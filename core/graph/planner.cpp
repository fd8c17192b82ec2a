#include "core/graph/planner.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>

namespace tessera {
namespace graph {

namespace {

size_t aligned(size_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

// Free blocks of the arena, by offset; best fit with coalescing on release.
class Arena {
 public:
  size_t allocate(size_t size) {
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second >= size && (best == free_.end() || it->second < best->second)) best = it;
    if (best == free_.end()) {
      // No hole fits: grow the arena, starting inside a free block that touches its end.
      if (!free_.empty() && std::prev(free_.end())->first + std::prev(free_.end())->second == end_) {
        auto last = std::prev(free_.end());
        const size_t offset = last->first;
        end_ = offset + size;
        free_.erase(last);
        return offset;
      }
      const size_t offset = end_;
      end_ += size;
      return offset;
    }
    const size_t offset = best->first, left = best->second - size;
    free_.erase(best);
    if (left) free_[offset + size] = left;
    return offset;
  }

  void release(size_t offset, size_t size) {
    auto it = free_.emplace(offset, size).first;
    if (auto next = std::next(it); next != free_.end() && offset + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }

  size_t size() const { return end_; }

 private:
  std::map<size_t, size_t> free_;  // offset -> size
  size_t end_ = 0;
};

}  // namespace

MemoryPlan plan_memory(const Graph& g) {
  const int nv = static_cast<int>(g.values.size()), nn = static_cast<int>(g.nodes.size());
  constexpr int kEnd = std::numeric_limits<int>::max();
  MemoryPlan plan;
  plan.place.assign(nv, MemoryPlan::Place::external);
  plan.offset.assign(nv, 0);
  plan.base.assign(nv, -1);
  plan.skip.assign(nn, false);

  // 1. Views share their source's buffer; `root` follows view chains to the owning value.
  std::vector<int> root(nv);
  for (int v = 0; v < nv; ++v) root[v] = v;
  for (int i = 0; i < nn; ++i) {
    const OpNode& n = g.nodes[i];
    if (n.outputs.size() != 1 || n.inputs.empty()) continue;
    std::vector<TensorMeta> metas;
    for (int in : n.inputs) metas.push_back(g.values[in].meta);
    if (auto off = n.op->view_offset(metas)) {
      const int src = n.inputs[0], out = n.outputs[0];
      plan.place[out] = MemoryPlan::Place::view;
      plan.base[out] = plan.place[src] == MemoryPlan::Place::view ? plan.base[src] : src;
      plan.offset[out] = (plan.place[src] == MemoryPlan::Place::view ? plan.offset[src] : 0) + *off;
      root[out] = root[src];
      plan.skip[i] = true;
    }
  }

  // 2. Last use of each root buffer: the last reader of the value or of any view of it.
  std::vector<int> last_use(nv, -1);
  for (int i = 0; i < nn; ++i)
    for (int in : g.nodes[i].inputs) last_use[root[in]] = std::max(last_use[root[in]], i);
  for (const auto& out : g.outputs) {
    const int v = out.second;
    if (plan.place[v] == MemoryPlan::Place::external && g.values[v].kind == ValueKind::intermediate)
      plan.place[v] = MemoryPlan::Place::output;  // its own buffer, read after the step
    else
      last_use[root[v]] = kEnd;  // a view of an arena value: keep the arena block to the end
  }

  // 3. Optimizer results go straight into the storage they replace when nothing reads the old
  //    contents later (and the op tolerates its output over its input); otherwise copied at the end.
  for (const WriteBack& w : g.writes) {
    const int p = g.values[w.value].producer;
    bool later_reader = false;
    for (int c : g.values[w.target].consumers) later_reader |= c > p;
    bool reads_target = false, in_place_ok = false;
    if (p >= 0) {
      const OpNode& n = g.nodes[p];
      reads_target = std::find(n.inputs.begin(), n.inputs.end(), w.target) != n.inputs.end();
      in_place_ok = n.op->in_place_safe();
    }
    if (p >= 0 && !later_reader && plan.place[w.value] == MemoryPlan::Place::external &&
        g.values[w.value].kind == ValueKind::intermediate && (!reads_target || in_place_ok) &&
        last_use[w.value] != kEnd) {
      plan.place[w.value] = MemoryPlan::Place::bound;
      plan.base[w.value] = w.target;
      ++plan.bound_writes;
    } else {
      plan.copies.push_back(w);
      last_use[root[w.value]] = kEnd;
    }
  }

  // 4. Walk the nodes: allocate outputs (in place where safe), free buffers after their last use.
  std::vector<int> readers(nv, 0);  // reads of each root buffer, views included
  for (const OpNode& n : g.nodes)
    for (int in : n.inputs) ++readers[root[in]];
  Arena arena;
  std::vector<bool> owns(nv, false);  // value currently owns an arena block
  for (int i = 0; i < nn; ++i) {
    const OpNode& n = g.nodes[i];
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const int v = n.outputs[k];
      if (plan.place[v] != MemoryPlan::Place::external || g.values[v].kind != ValueKind::intermediate) continue;
      const size_t bytes = aligned(g.values[v].meta.nbytes());
      plan.naive_bytes += bytes;
      if (last_use[v] < 0) last_use[v] = i;  // never read: lives through its own node only
      plan.place[v] = MemoryPlan::Place::arena;
      if (k == 0 && n.op->in_place_safe() && !n.inputs.empty()) {
        const int in = n.inputs[0];
        // Same meta, not just the same rounded size: a broadcast input ([1] against [7]) or one of
        // another element size (gelu's f32 x under a bf16 y) is not element-for-element y.
        if (root[in] == in && owns[in] && last_use[in] == i && readers[in] == 1 &&
            g.values[in].meta == g.values[v].meta) {
          plan.offset[v] = plan.offset[in];
          owns[in] = false;
          owns[v] = true;
          ++plan.in_place;
          continue;
        }
      }
      plan.offset[v] = arena.allocate(bytes);
      owns[v] = true;
    }
    // Release what this node read (or made) for the last time.
    auto release = [&](int v) {
      if (owns[v] && last_use[v] == i) {
        arena.release(plan.offset[v], aligned(g.values[v].meta.nbytes()));
        owns[v] = false;
      }
    };
    for (int in : n.inputs) release(root[in]);
    for (int out : n.outputs) release(out);
  }
  plan.arena_bytes = arena.size();
  return plan;
}

std::string MemoryPlan::summary() const {
  std::ostringstream os;
  os << "arena " << arena_bytes << " bytes (naive, no reuse: " << naive_bytes << "; outputs outside), " << in_place
     << " in-place outputs, " << bound_writes << " updates written in place, " << copies.size() << " copied back";
  return os.str();
}

}  // namespace graph
}  // namespace tessera
