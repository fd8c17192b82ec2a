// Rows of causal attention scores for the GPU kernels of causal_softmax and
// causal_softmax_backward: x [..., T, S] seen as [rows, S], row r = (leading index, query
// t = r mod T), which sees the keys s < n = t + S − T + 1 (1 <= n <= S since S >= T).
//
// Launch plan (a function of S only, so results do not depend on anything else):
//   S <= kCausalWarpMaxS: one warp per row, kCausalWarpsPerBlock warps per block; lane l holds
//     keys s = l + 32i, i < K, in registers (K = per_lane(S), a power of two with 32K >= S), so
//     the row is read once and reduced with warp shuffles;
//   longer rows: one block per row, threads_for(S, kCausalBlockThreads); each thread caches its
//     keys s = tid, tid + blockDim, ... in shared memory when the row fits (cached_fits), so
//     the row is read once, else it reads them again from global memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/common/cuda/block_reduce.cuh"

namespace tessera {
namespace cuda {

constexpr int kCausalWarpsPerBlock = 4;
constexpr int64_t kCausalWarpMaxS = 1024;  ///< 32 lanes × 32 values in registers
constexpr int kCausalBlockThreads = 512;
/// Row cache per block: under the 48 KiB a block gets without an opt-in, leaving room for the
/// static shared memory of block_reduce.
constexpr size_t kCausalSharedBytes = 40 * 1024;

/// max(a, b) for warp_reduce / block_reduce (−inf is the identity).
struct MaxOp {
  template <class A>
  __device__ A operator()(A a, A b) const {
    return a > b ? a : b;
  }
};

/// Visible keys of row r: n = (r mod T) + S − T + 1.
__device__ __forceinline__ int64_t causal_visible(int64_t r, int64_t T, int64_t S) { return r % T + S - T + 1; }

/// Calls f(std::integral_constant<int, K>{}) with the smallest K in {1, 2, 4, 8, 16, 32} such
/// that 32K >= S (S <= kCausalWarpMaxS).
template <class F>
void dispatch_per_lane(int64_t S, F&& f) {
  if (S <= 32) return f(std::integral_constant<int, 1>{});
  if (S <= 64) return f(std::integral_constant<int, 2>{});
  if (S <= 128) return f(std::integral_constant<int, 4>{});
  if (S <= 256) return f(std::integral_constant<int, 8>{});
  if (S <= 512) return f(std::integral_constant<int, 16>{});
  return f(std::integral_constant<int, 32>{});
}

/// Grid of the warp-per-row kernels for `rows` rows.
inline unsigned causal_warp_grid(int64_t rows) {
  return grid_for_rows((rows + kCausalWarpsPerBlock - 1) / kCausalWarpsPerBlock);
}

/// Whether `values` accumulators of `bytes_each` fit the dynamic shared memory of one block.
inline bool cached_fits(int64_t values, size_t bytes_each) {
  return static_cast<size_t>(values) * bytes_each <= kCausalSharedBytes;
}

}  // namespace cuda
}  // namespace tessera
