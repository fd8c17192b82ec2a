// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
// a counter-based generator. Block b of stream `seed` is philox(counter = b, key = seed):
// four 32-bit words that depend only on (seed, b), so every device, thread and order of
// evaluation draws the same numbers, and a stream resumes exactly from (seed, offset).
//
// Element layout (shared by every kernel that draws numbers, on every device):
//   f32 uniform / bernoulli:  element i uses block start + i/4, word i%4
//   f32 normal (Box-Muller):  element i uses block start + i/2, words 2(i%2), 2(i%2)+1
//   f64 uniform:              element i uses block start + i/2, words 2(i%2), 2(i%2)+1
//   f64 normal:               element i uses block start + i, all four words
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TS_HOST_DEVICE inline
#endif

namespace tessera {
namespace philox {

struct Block {
  uint32_t w[4];
};

TS_HOST_DEVICE void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

/// Philox4x32 with 10 rounds on a full 128-bit counter and 64-bit key.
TS_HOST_DEVICE Block philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kM0, c0, hi0, lo0);
    mulhilo(kM1, c2, hi1, lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return {{c0, c1, c2, c3}};
}

/// Block `index` of stream `seed`.
TS_HOST_DEVICE Block block(uint64_t seed, uint64_t index) {
  return philox4x32_10(static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, 0u,
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

/// 32 random bits -> f32 in [0, 1) with 24 bits of precision.
TS_HOST_DEVICE float to_unit_f32(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }
/// 32 random bits -> f32 in (0, 1] (safe for log).
TS_HOST_DEVICE float to_unit_open_f32(uint32_t x) { return (static_cast<float>(x >> 8) + 1.0f) * (1.0f / 16777216.0f); }
/// 64 random bits -> f64 in [0, 1) with 53 bits of precision.
TS_HOST_DEVICE double to_unit_f64(uint32_t hi, uint32_t lo) {
  uint64_t x = (static_cast<uint64_t>(hi) << 32 | lo) >> 11;
  return static_cast<double>(x) * (1.0 / 9007199254740992.0);
}
TS_HOST_DEVICE double to_unit_open_f64(uint32_t hi, uint32_t lo) {
  uint64_t x = (static_cast<uint64_t>(hi) << 32 | lo) >> 11;
  return (static_cast<double>(x) + 1.0) * (1.0 / 9007199254740992.0);
}

/// Element i of an f32 uniform [0,1) draw starting at block `start`.
TS_HOST_DEVICE float uniform_f32(uint64_t seed, uint64_t start, uint64_t i) {
  return to_unit_f32(block(seed, start + i / 4).w[i % 4]);
}

/// Element i of an f32 standard-normal draw starting at block `start` (Box-Muller, cos branch).
TS_HOST_DEVICE float normal_f32(uint64_t seed, uint64_t start, uint64_t i) {
  Block b = block(seed, start + i / 2);
  unsigned j = 2 * static_cast<unsigned>(i % 2);
  float u1 = to_unit_open_f32(b.w[j]), u2 = to_unit_f32(b.w[j + 1]);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530717958647692f * u2);
}

TS_HOST_DEVICE double uniform_f64(uint64_t seed, uint64_t start, uint64_t i) {
  Block b = block(seed, start + i / 2);
  unsigned j = 2 * static_cast<unsigned>(i % 2);
  return to_unit_f64(b.w[j], b.w[j + 1]);
}

TS_HOST_DEVICE double normal_f64(uint64_t seed, uint64_t start, uint64_t i) {
  Block b = block(seed, start + i);
  double u1 = to_unit_open_f64(b.w[0], b.w[1]), u2 = to_unit_f64(b.w[2], b.w[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

/// A block offset held as two 32-bit words (low, high), as random ops' Philox-base inputs store it.
TS_HOST_DEVICE uint64_t join_words(uint32_t lo, uint32_t hi) { return static_cast<uint64_t>(hi) << 32 | lo; }

/// Blocks consumed by a draw of n elements (f32 uniform / bernoulli).
TS_HOST_DEVICE uint64_t blocks_for_uniform_f32(uint64_t n) { return (n + 3) / 4; }
/// Blocks consumed by n elements of f32 normal or f64 uniform.
TS_HOST_DEVICE uint64_t blocks_for_pairs(uint64_t n) { return (n + 1) / 2; }

}  // namespace philox
}  // namespace tessera
