#include "common/random_tokens.h"

#include <vector>

#include "core/error.h"

namespace tessera {
namespace bench {

Tensor random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  TS_CHECK(n >= 0 && vocab > 0, ValueError, "random_tokens: need n >= 0 and vocab > 0, got " << n << ", " << vocab);
  std::vector<int32_t> ids(n);
  uint64_t s = seed;
  for (auto& id : ids) {
    // splitmix64: a fixed, portable stream (std:: distributions differ between libraries).
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    id = static_cast<int32_t>((z ^ (z >> 31)) % static_cast<uint64_t>(vocab));
  }
  return from_vector(ids, {n});
}

}  // namespace bench
}  // namespace tessera
