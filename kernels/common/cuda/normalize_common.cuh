// Shared pieces of the group-normalization kernels (normalize_forward.cuh,
// normalize_backward.cuh): packs, the teams that normalize one unit, launch helpers. The file
// comment of normalize.cuh describes the thread mapping.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "core/tensor.h"
#include "kernels/common/cuda/block_reduce.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/vectorized.cuh"

namespace tessera {
namespace cuda {

namespace norm {

// gh = g·gamma rounded on its own (no fused multiply-add with what it is added to or subtracted
// from): both backward passes then see the same gh, so gh − mean(gh) is exactly 0 for a group
// of one element, whose dx must be 0 (rstd = 1/sqrt(eps) would magnify any difference).
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

template <class T>
constexpr int kPack = static_cast<int>(16 / sizeof(T));  ///< elements per 16-byte pack

/// kPack<T> elements, moved with one 128-bit load or store when aligned.
template <class T>
using Pack = cuda::Pack<T, kPack<T>>;

/// Sums of the kPack<T> columns of a pack, in acc_t.
template <class T>
struct alignas(16) AccPack {
  acc_t<T> v[kPack<T>];
};

constexpr int kWarpsPerBlock = 8;    ///< warp teams per block
constexpr int kFwdWarpIters = 8;     ///< packs per lane, forward warp teams
constexpr int kFwdBlockIters = 4;    ///< packs per thread, forward block teams
constexpr int kFwdMaxThreads = 1024;
constexpr int kBwdMaxThreads = 512;
/// Packs per thread backward: 16 elements (f64: 8) of g and x, and their column sums.
template <class T>
constexpr int kBwdIters = sizeof(T) == 8 ? 4 : 16 / kPack<T>;  // f32 4, f64 4, bf16/f16 2

template <class T>
__device__ __forceinline__ T zero_of() {
  return from_acc<T>(acc_t<T>(0));
}

/// The word that moves a pack of `Bytes` bytes in one load or store.
template <int Bytes>
struct Word;
template <>
struct Word<16> {
  using type = uint4;
};
template <>
struct Word<8> {
  using type = uint2;
};

/// Pack q (V elements) of a row of n elements: one V·sizeof(T)-byte load when kVec (n % V == 0,
/// row aligned to the pack), else element by element, zeros past n. The caller checks q·V < n.
/// V is kPack of the row's own type, or of the f32 side for a bf16/f16 row that meets f32 data
/// (4 elements: 8 bytes).
template <bool kVec, int V, class T>
__device__ __forceinline__ cuda::Pack<T, V> load_pack(const T* row, int q, int n) {
  cuda::Pack<T, V> r;
  if constexpr (kVec) {
    using W = typename Word<sizeof(T) * V>::type;
    const W w = *reinterpret_cast<const W*>(row + q * V);
    memcpy(&r, &w, sizeof(r));
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) r.v[e] = q * V + e < n ? row[q * V + e] : zero_of<T>();
  }
  return r;
}

template <bool kVec, class T, int V>
__device__ __forceinline__ void store_pack(T* row, int q, int n, const cuda::Pack<T, V>& r) {
  if constexpr (kVec) {
    using W = typename Word<sizeof(T) * V>::type;
    W w;
    memcpy(&w, &r, sizeof(r));
    *reinterpret_cast<W*>(row + q * V) = w;
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e)
      if (q * V + e < n) row[q * V + e] = r.v[e];
  }
}

/// The threads that share a unit: a warp (kWarp: blockDim.x / 32 teams per block) or the block.
template <bool kWarp>
struct Team {
  __device__ static int rank() { return static_cast<int>(kWarp ? threadIdx.x & 31 : threadIdx.x); }
  __device__ static int size() { return static_cast<int>(kWarp ? 32 : blockDim.x); }
  __device__ static int index() { return static_cast<int>(kWarp ? threadIdx.x >> 5 : 0); }  ///< in the block
  __device__ static int count() { return static_cast<int>(kWarp ? blockDim.x >> 5 : 1); }   ///< per block
  /// Every thread of the team gets the same bits (fixed tree).
  template <class V, class Op>
  __device__ static V reduce(V v, Op op, V identity) {
    if constexpr (kWarp) {
      (void)identity;
      return warp_reduce(v, op);
    } else {
      return block_reduce(v, op, identity);
    }
  }
};

}  // namespace norm

namespace norm {

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }  // null too
/// Whether p (null too) is aligned for a pack of V elements of T.
template <int V, class T>
bool pack_aligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * V) == 0;
}

/// Calls f(std::integral_constant<int, k>{}) for the smallest k of 1, 2, 4, ..., kMax with k >= n.
template <int kMax, int k = 1, class F>
void with_iters(int64_t n, F&& f) {
  if constexpr (k >= kMax) {
    f(std::integral_constant<int, kMax>{});
  } else {
    if (n <= k)
      f(std::integral_constant<int, k>{});
    else
      with_iters<kMax, 2 * k>(n, f);
  }
}

template <class F>
void with_vec(bool vec, F&& f) {
  if (vec)
    f(std::true_type{});
  else
    f(std::false_type{});
}

/// Threads of a block team: `packs` / `iters` rounded up to a warp.
inline int team_threads(int64_t packs, int iters) {
  return static_cast<int>((packs + 32 * iters - 1) / (32 * iters) * 32);
}

}  // namespace norm

}  // namespace cuda
}  // namespace tessera
