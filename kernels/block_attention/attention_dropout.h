// Dropout on the attention probabilities inside block attention's kernels (CPU and CUDA, forward
// and backward), drawing exactly the mask that the `dropout` op would draw on the dense
// probability tensor P [B, H, T, T] from the same Philox stream (core/philox.h):
//   element (bh, t, s) has index n = (bh·T + t)·T + s, uses word n % 4 of block first + n / 4,
//   and is kept iff its uniform u = to_unit_f32(word) >= p; kept values are scaled by 1/(1 − p).
// So block_attention with dropout p equals dropout(softmax(scores), p) · V on the same generator
// state, bit for bit in the mask. u = (word >> 8) / 2^24 exactly, so u >= p is the integer test
// (word >> 8) >= ceil(p · 2^24) (exact in double: a power-of-two scaling).
// Positions outside the layout or above the diagonal are never drawn (their P is 0 anyway).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/philox.h"

namespace tessera {

/// What a kernel needs to draw the mask: threshold 0 means no dropout.
struct AttentionDropout {
  uint32_t threshold = 0;  ///< keep iff (word >> 8) >= threshold
  double scale = 1;        ///< 1 / (1 − p) (kernels round it to their accumulation type)
  uint64_t seed = 0;
  uint64_t first = 0;  ///< first Philox block (start + base)

  /// For probability p in [0, 1): threshold ceil(p · 2^24), scale 1/(1 − p).
  static AttentionDropout make(double p, uint64_t seed, uint64_t first) {
    AttentionDropout d;
    if (p <= 0) return d;
    d.threshold = static_cast<uint32_t>(std::ceil(p * 16777216.0));
    d.scale = 1.0 / (1.0 - p);
    d.seed = seed;
    d.first = first;
    return d;
  }
  TS_HOST_DEVICE bool on() const { return threshold != 0; }
  /// This mask with a Philox base added to `first`: base = i32[2] {low, high} (nullptr: none).
  /// Kernels call it on the device with the base input's device pointer, so that a captured CUDA
  /// graph draws from whatever base was written before its launch.
  TS_HOST_DEVICE AttentionDropout with_base(const int32_t* base) const {
    AttentionDropout d = *this;
    if (base) d.first += philox::join_words(static_cast<uint32_t>(base[0]), static_cast<uint32_t>(base[1]));
    return d;
  }
  /// Whether word w keeps its element.
  TS_HOST_DEVICE bool keeps(uint32_t w) const { return (w >> 8) >= threshold; }
  /// The Philox block that holds element n = (bh·T + t)·T + s (its word n % 4).
  TS_HOST_DEVICE philox::Block block_of(uint64_t n) const { return philox::block(seed, first + n / 4); }
  /// Whether element n is kept.
  TS_HOST_DEVICE bool keeps_element(uint64_t n) const { return keeps(block_of(n).w[n % 4]); }
};

/// Elements of one mask read in increasing order (the CPU kernels' rows): one Philox block per
/// 4 consecutive elements instead of one per element.
class AttentionMaskReader {
 public:
  explicit AttentionMaskReader(const AttentionDropout& d) : d_(d) {}
  bool keeps(uint64_t n) {
    if (n / 4 != index_) {
      index_ = n / 4;
      block_ = d_.block_of(n);
    }
    return d_.keeps(block_.w[n % 4]);
  }

 private:
  const AttentionDropout& d_;
  uint64_t index_ = ~uint64_t{0};
  philox::Block block_{};
};

}  // namespace tessera
