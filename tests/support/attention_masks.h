// Token-level masks of attention layouts for tests that build attention from dense ops.
#pragma once

#include <vector>

#include "kernels/ops.h"

namespace tessera {
namespace testing {

/// u8 [H, T, T]: 1 where head h's token t may NOT attend to token s (block not in the layout,
/// or s > t).
inline Tensor excluded_mask(const AttentionLayout& l) {
  const int64_t H = l.heads(), T = l.seq_len(), bs = l.block_size();
  std::vector<uint8_t> m(H * T * T);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t s = 0; s < T; ++s) m[(h * T + t) * T + s] = !(s <= t && l.has(h, t / bs, s / bs));
  return from_vector(m, {H, T, T}, DType::u8);
}

}  // namespace testing
}  // namespace tessera
