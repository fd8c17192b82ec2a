// The Hopper (sm_90a) kernel of bsmm_dw at bs 64 (see bsmm_sm90.h).
//
// Work items are the layout's dw_wide_group runs (up to four blocks of one block row, the
// longest first), handed to the thread blocks that are free as in the gather kernel (first item
// by index, then the layout's counter; an mbarrier ring to the consumers). Per 64-row step of N
// the producer thread copies the X strip [64, 64] and the dY strips of the run's block columns;
// each consumer warpgroup computes two of the blocks, both operands MN-major and the X strip's
// descriptor shared:
//
//   acc [64, 64] += X_strip[t0 .. t0+64, :]ᵀ · dY_strip[t0 .. t0+64, :]
//
// Deterministic: each element is summed by one thread in row order, with no atomics on data.
#include "kernels/common/cuda/bsmm_sm90.h"

#include "kernels/common/cuda/bsmm_sm90_common.cuh"

namespace tessera {
namespace cuda {
namespace sm90 {
namespace {

template <int kG_>
struct GradientTile {
  static constexpr int kKT = 64;                  // rows of n per stage
  static constexpr int kStripBytes = kKT * 128;   // [64 rows, 64 values]
  static constexpr int kG = kG_;                  // blocks per work item (kG / 2 per consumer warpgroup)
  static constexpr int kStageBytes = (1 + kG) * kStripBytes;
  static constexpr int kStages = 5;
  static constexpr int kItemRing = 4;
  static constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + kItemRing * (16 + 16) + 1024;
};

template <class T, class TO, int kG>
__global__ void __launch_bounds__(kThreads, 1)
    gradient_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_dy,
                    BlockGradient p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tile = GradientTile<kG>;
  constexpr int kPerWG = kG / 2;
  constexpr int kStages = Tile::kStages;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align1024(smem_raw);
  constexpr int kRing = Tile::kItemRing;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * Tile::kStageBytes);
  uint64_t* empty = full + kStages;
  uint64_t* item_full = empty + kStages;
  uint64_t* item_empty = item_full + kRing;
  int4* ring = reinterpret_cast<int4*>(item_empty + kRing);  // (first block k, count); k < 0: no more
  auto strip = [&](int s, int i) { return smem + s * Tile::kStageBytes + i * Tile::kStripBytes; };  // 0: X, 1+g: dY

  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumerWarps);
    }
    for (int s = 0; s < kRing; ++s) {
      mbar_init(&item_full[s], 1);
      mbar_init(&item_empty[s], kConsumerWarps);
    }
    fence_barrier_init();
  }
  __syncthreads();
  const int steps = static_cast<int>((p.n + Tile::kKT - 1) / Tile::kKT);

  if (wg == 0) {
    // Producer: one thread. Items (runs of blocks, the longest first) go to the thread blocks
    // that are free: the first is blockIdx.x, then gridDim.x + the launch's counter.
    if (threadIdx.x != 0) return;
    prefetch_tma_map(&map_x);
    prefetch_tma_map(&map_dy);
    int it = 0, item = blockIdx.x;
    for (int n = 0;; ++n) {
      int4 w = make_int4(-1, 0, 0, 0);
      int next = 0;
      if (item < p.groups) {
        w.x = p.group[2 * item];
        w.y = p.group[2 * item + 1];
        next = static_cast<int>(gridDim.x) + atomicAdd(p.counter, 1);
      }
      const int slot = n % kRing;
      mbar_wait(&item_empty[slot], ((n / kRing) & 1) ^ 1);
      ring[slot] = w;
      mbar_arrive(&item_full[slot]);
      if (w.x < 0) {  // the last thread block done sets the counter back to 0 (see gather_kernel)
        if (atomicAdd(p.counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
          p.counter[0] = 0;
          p.counter[1] = 0;
        }
        break;
      }
      const int k0 = w.x, count = w.y, r = p.block_row[k0];
      for (int step = 0; step < steps; ++step, ++it) {
        const int s = it % kStages;
        mbar_wait(&empty[s], ((it / kStages) & 1) ^ 1);
        mbar_arrive_expect_tx(&full[s], (1 + count) * Tile::kStripBytes);
        tma_load_2d(strip(s, 0), &map_x, &full[s], r * 64, step * Tile::kKT);
        for (int b = 0; b < count; ++b)
          tma_load_2d(strip(s, 1 + b), &map_dy, &full[s], p.block_col[k0 + b] * 64, step * Tile::kKT);
      }
      item = next;
    }
    return;
  }

  // Consumer warpgroup c computes blocks k0 + kPerWG·c .. of each item (those it has).
  const int c = wg - 1, warp = (threadIdx.x / 32) % 4, g = lane / 4, t = lane % 4;
  TO* dw = static_cast<TO*>(p.dw);
  int it = 0;
  for (int n = 0;; ++n) {
    const int slot = n % kRing;
    mbar_wait(&item_full[slot], (n / kRing) & 1);
    const int4 w = ring[slot];
    __syncwarp();
    if (lane == 0) mbar_arrive(&item_empty[slot]);
    if (w.x < 0) break;
    const int k0 = w.x, count = w.y;
    const int mine = min(kPerWG, max(0, count - kPerWG * c));  // blocks of this warpgroup in the item
    float acc[kPerWG][32];
#pragma unroll
    for (int b = 0; b < kPerWG; ++b)
#pragma unroll
      for (int i = 0; i < 32; ++i) acc[b][i] = 0.f;
    for (int step = 0; step < steps; ++step, ++it) {
      const int s = it % kStages;
      mbar_wait(&full[s], (it / kStages) & 1);
      if (mine > 0) {
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tile::kKT / 16; ++kk) {
          // A (m = i, k = row) = X[row][i], B (k = row, n = j) = dY[row][j]: both MN-major, rows are k
          const uint64_t da = make_desc(strip(s, 0) + kk * 16 * 128, Tile::kStripBytes, 1024, 128);
#pragma unroll
          for (int b = 0; b < kPerWG; ++b) {
            if (b >= mine) break;
            const uint64_t db = make_desc(strip(s, 1 + kPerWG * c + b) + kk * 16 * 128, Tile::kStripBytes, 1024, 128);
            Wgmma<T, 64>::template run<1, 1>(acc[b], da, db, step > 0 || kk > 0);
          }
        }
        wgmma_commit();
        wgmma_wait<1>();
#pragma unroll
        for (int b = 0; b < kPerWG; ++b) fence_operands(acc[b]);
      }
      // The whole warp's reads of the previous stage come before lane 0 releases it.
      __syncwarp();
      if (step > 0 && lane == 0) mbar_arrive(&empty[(it - 1) % kStages]);
    }
    if (mine > 0) {
      wgmma_wait<0>();
#pragma unroll
      for (int b = 0; b < kPerWG; ++b) fence_operands(acc[b]);
    }
    __syncwarp();
    if (steps > 0 && lane == 0) mbar_arrive(&empty[(it - 1) % kStages]);
#pragma unroll
    for (int b = 0; b < kPerWG; ++b) {
      if (b >= mine) break;
      const int64_t k = static_cast<int64_t>(k0) + kPerWG * c + b;
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i = warp * 16 + g + 8 * h, col = 8 * j + 2 * t;
          store_pair(dw + (k * 64 + i) * 64 + col, acc[b][4 * j + 2 * h], acc[b][4 * j + 2 * h + 1], p.accumulate);
        }
    }
  }
#else
  __trap();
#endif
}


}  // namespace

bool gradient_supported(const BlockGradient& g, int device) {
  return g.bs == 64 && half_dtype(g.in_dtype) && (g.out_dtype == g.in_dtype || g.out_dtype == DType::f32) &&
         aligned16(g.x) && aligned16(g.dy) && aligned16(g.dw) && g.n > 0 && g.n <= INT32_MAX && device_ok(device);
}


void block_gradient(const BlockGradient& g, cudaStream_t stream) {
  if (g.wide_groups == 0) return;
  dispatch_types(g.in_dtype, g.out_dtype, [&](auto tin, auto tout) {
    using T = typename decltype(tin)::type;
    using TO = typename decltype(tout)::type;
    // Work items: runs of four blocks (two per consumer warpgroup). On the H200 1.25x faster than
    // runs of two at density 0.1 and 1 (transformer shape), 1.2x slower at 0.25. The kernel's
    // time comes in whole waves of equally long items (each sums over all N rows), which a split
    // of N would smooth out.
    using Tile = GradientTile<kDwWideGroup>;
    const CUtensorMap map_x = tensor_map(g.x, g.in_dtype, g.n, g.C, Tile::kKT, 64);
    const CUtensorMap map_dy = tensor_map(g.dy, g.in_dtype, g.n, g.K, Tile::kKT, 64);
    BlockGradient items = g;
    items.group = g.wide_group;
    items.groups = g.wide_groups;
    constexpr auto kernel = &gradient_kernel<T, TO, kDwWideGroup>;
    const int grid = std::min(items.groups, persistent_grid<kernel>(Tile::kSmemBytes));
    kernel<<<grid, kThreads, Tile::kSmemBytes, stream>>>(map_x, map_dy, items);
    TS_CUDA_LAUNCH_CHECK("bsmm_dw");
    g_launches.fetch_add(1, std::memory_order_relaxed);
  });
}


}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
