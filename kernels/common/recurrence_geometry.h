// The shapes and shared-memory budget of the persistent LSTM recurrence kernels
// (kernels/common/cuda/lstm_persistent.cu), shared by the kernels and their host-side plan
// (recurrence_plan.cpp), which every build compiles and the CPU tests check.
//
// A thread block of kThreads owns groups of U hidden units; its product per step is
// P [B ≤ 64, N] = operand [B, K] · W_slice [K, N] with N = 4·C·U columns forward (the four gates of
// the cluster's C·U units) and C·U backward. Its dynamic shared memory, in order:
//   W region   w_rows × N × 2 bytes (the resident slice, swizzled)
//   ring       ring slots of stage_bytes(stage_k) (the operand's stage; with streamed W followed by
//              the stage's W rows, stage_k × N × 2), overlapping the K-split partial sums
//              partial_sum_bytes(N, wk) after the product
//   staging    epilogue_bytes(U) (the forward's gx_t, bf16/f16)
//   state      groups × 64 × U × 4 (c or dc, f32)
//   chunks     max_chunks × 4 (each chunk's operand column) + 256 bytes of slack
#pragma once

#include <cstddef>

#if defined(__CUDACC__)
#define TS_RECURRENCE_HD __host__ __device__
#else
#define TS_RECURRENCE_HD
#endif

namespace tessera {
namespace recurrence {

constexpr int kThreads = 512, kWarps = 16;
constexpr int kMaxBatch = 64;  // rows of the product (B, padded to 16)
// K columns per pipeline stage: 256 where three such stages fit beside W_h's slice, else 128
// (fewer, larger stages: fewer barriers per step); streamed W always 128. Rows of a stage are
// padded by 16 bytes, so that the 8 rows one ldmatrix phase reads fall on distinct banks.
constexpr int kMaxStageK = 256, kStreamStageK = 128;
constexpr int kMinStages = 2, kMaxStages = 15;  // cp.async ring depth: as deep as shared memory allows
constexpr int kMaxGroupsPerBlock = 4;
// Split groups (RecurrencePlan::packing): the items travel in the kernel's parameters (4 KB in all).
constexpr int kMaxItems = 320, kMaxItemBlocks = 160;
// The dense layers' default K split over clusters (TESSERA_LSTM_CLUSTER overrides): measured on
// the H200, see docs/lstm_gpu.md.
constexpr int kForwardCluster = 2, kBackwardCluster = 2;
constexpr int kDenseChunk = 64;

/// The cluster sizes the K split is built for: pairs at 8 and 16 units per group (the dense layers
/// up to H 2112, whose blocks read all of h or dpre per step). Clusters of 4 were slower on the
/// H200 in both directions (docs/lstm_gpu.md) and are not built.
TS_RECURRENCE_HD constexpr bool has_cluster_kernel(int units, int cluster) {
  return cluster == 1 || ((units == 8 || units == 16) && cluster == 2);
}
TS_RECURRENCE_HD constexpr int stage_bytes(int stage_k) { return kMaxBatch * (stage_k + 8) * 2; }
/// Columns N of a block's product: the four gates of the cluster's units forward, the units backward.
TS_RECURRENCE_HD constexpr int product_columns(int units, bool backward, int cluster) {
  return backward ? cluster * units : 4 * cluster * units;
}
/// Columns of one warp tile of the product.
TS_RECURRENCE_HD constexpr int warp_tile_columns(int n) { return n >= 16 ? 16 : 8; }
/// The K-split of a product with `tiles` warp tiles: warps split K when the tiles are fewer.
TS_RECURRENCE_HD constexpr int k_split(int tiles) { return tiles >= kWarps ? 1 : kWarps / tiles; }
/// The forward's staging of gx_t [64, 4U] (bf16/f16); the backward reads its epilogue inputs into registers.
TS_RECURRENCE_HD constexpr int epilogue_bytes(int units, bool backward) {
  return backward ? 0 : kMaxBatch * 4 * units * 2;
}
/// The K-split partial sums red[wk][64][N + 4] (f32).
TS_RECURRENCE_HD constexpr size_t partial_sum_bytes(int n, int wk) {
  return static_cast<size_t>(wk) * kMaxBatch * (n + 4) * 4;
}
/// Everything but the ring: the W region of w_rows rows, the staging, the state of `groups`
/// groups, the chunk table and the slack.
inline size_t fixed_bytes(int units, bool backward, int n, int w_rows, int max_chunks, int groups) {
  return static_cast<size_t>(w_rows) * n * 2 + epilogue_bytes(units, backward) +
         static_cast<size_t>(groups) * kMaxBatch * units * 4 + static_cast<size_t>(max_chunks) * 4 + 256;
}

}  // namespace recurrence
}  // namespace tessera
