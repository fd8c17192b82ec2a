// Random tensors from a counter-based generator (Philox 4x32-10, see core/philox.h).
//
//   Generator gen(42);
//   Tensor w = normal({256, 256}, 0.0, 0.02, gen);   // same numbers on every device
//   auto state = gen.state();                          // {seed, offset}: save it...
//   gen.set_state(state);                              // ...and the stream resumes exactly
//
// A Generator is (seed, offset): offset counts the 128-bit Philox blocks used so far.
// Each draw reserves the blocks it needs and advances the offset.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace tessera {

class Generator {
 public:
  struct State {
    uint64_t seed = 0;
    uint64_t offset = 0;
    bool operator==(const State& o) const { return seed == o.seed && offset == o.offset; }
  };

  explicit Generator(uint64_t seed = 0, uint64_t offset = 0) : state_{seed, offset} {}
  uint64_t seed() const { return state_.seed; }
  uint64_t offset() const { return state_.offset; }
  State state() const { return state_; }
  void set_state(const State& s) { state_ = s; }
  void manual_seed(uint64_t seed) { state_ = {seed, 0}; }
  /// Reserves `blocks` Philox blocks and returns the first one's index. With a share (below) it
  /// reserves world · blocks and returns the first block of this rank's part.
  uint64_t reserve(uint64_t blocks) {
    const uint64_t start = state_.offset + static_cast<uint64_t>(share_rank_) * blocks;
    state_.offset += static_cast<uint64_t>(share_world_) * blocks;
    return start;
  }
  /// Reserves `blocks` as they are, share or not (a compiled step's per-run reservation, whose
  /// nodes' offsets already hold the rank's share).
  uint64_t reserve_whole(uint64_t blocks) {
    const uint64_t start = state_.offset;
    state_.offset += blocks;
    return start;
  }
  /// Data parallelism: this process is rank `rank` of `world` and takes its share of every draw, so
  /// that its draws are the part of one process's draws for the whole batch that falls on its rows.
  /// A draw of n blocks by each rank is one draw of world · n blocks, rank r's being blocks
  /// r·n … (r+1)·n − 1: when each rank's tensor is its slice r of the global tensor along the leading
  /// (batch) dim and fills whole blocks (dropout: a multiple of 4 elements), the masks are the one
  /// process's, row for row. Every rank's offset advances alike, so checkpoints and resumes see one
  /// stream. Not part of State (the run's layout, not its position). (0, 1): no share.
  void set_share(int rank, int world) {
    TS_CHECK(world >= 1 && rank >= 0 && rank < world, ValueError,
             "Generator::set_share: rank " << rank << " of " << world);
    share_rank_ = rank;
    share_world_ = world;
  }
  int share_rank() const { return share_rank_; }
  int share_world() const { return share_world_; }

 private:
  State state_;
  int share_rank_ = 0, share_world_ = 1;
};

/// The process-wide generator used when none is passed (seed 0 until manual_seed).
Generator& default_generator();
/// Re-seeds the default generator.
void manual_seed(uint64_t seed);

/// Uniform in [low, high). Floating dtypes only (f32 default).
Tensor uniform(const Shape& shape, double low, double high, Generator& gen, TensorOptions opts = {});
Tensor uniform(const Shape& shape, double low = 0.0, double high = 1.0, TensorOptions opts = {});
/// Normal(mean, std).
Tensor normal(const Shape& shape, double mean, double std, Generator& gen, TensorOptions opts = {});
Tensor normal(const Shape& shape, double mean = 0.0, double std = 1.0, TensorOptions opts = {});
/// 1 with probability p, else 0 (f32 default; any dtype). p in [0, 1].
Tensor bernoulli(const Shape& shape, double p, Generator& gen, TensorOptions opts = {});
Tensor bernoulli(const Shape& shape, double p, TensorOptions opts = {});

}  // namespace tessera
