// Memory planning for a Graph (the ggml graph-allocator idea):
// - liveness over the node order: a buffer is freed after its last reader has run;
// - views (reshape, contiguous slices) share their source's buffer and extend its life;
// - an in-place-safe op reuses its first input's buffer when that input has no other reader
//   (and is not an output): no allocation, no copy;
// - optimizer results are written straight into the parameter/state storage they replace
//   when no later node reads the old value;
// - everything else gets a best-fit offset in one arena per device.
// Inputs, parameters, state, constants and marked outputs live outside the arena.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/graph/graph.h"

namespace tessera {
namespace graph {

/// Byte alignment of every arena offset.
constexpr size_t kArenaAlignment = 64;

struct MemoryPlan {
  /// Per value: where its bytes are. external: an input, parameter, state or constant (their
  /// own storage); output: a marked output (a buffer of its own, outside the arena).
  enum class Place { external, arena, view, bound, output };
  std::vector<Place> place;
  std::vector<size_t> offset;   ///< arena: byte offset; view: byte offset inside `base`'s buffer
  std::vector<int> base;        ///< view: the value whose buffer it shares; bound: the param/state value
  std::vector<bool> skip;       ///< per node: nothing to compute (a view)
  std::vector<WriteBack> copies;  ///< write-backs that could not be bound: copied after the step

  size_t arena_bytes = 0;       ///< the planned arena
  size_t naive_bytes = 0;       ///< every intermediate in a buffer of its own (no reuse)
  int in_place = 0;             ///< outputs that took over their input's buffer
  int bound_writes = 0;         ///< optimizer results written straight into params/state

  std::string summary() const;
};

/// Plans `g` (which must be in execution order).
MemoryPlan plan_memory(const Graph& g);

}  // namespace graph
}  // namespace tessera
