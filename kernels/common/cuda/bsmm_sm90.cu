// The Hopper (sm_90a) kernels of bsmm, bsmm_dx and bsmm_dw (see bsmm_sm90.h): wgmma on
// operands brought into shared memory by the bulk tensor copy engine (TMA), a ring of stages
// guarded by mbarriers, one producer warp and two consumer warpgroups, a persistent grid.
//
// Gather product (fwd and dx), bs 16, 32 and 64. The work items are the (output block column o,
// tile of 256 rows) pairs, in groups of two row tiles that visit every column (work_item in
// bsmm_store.cuh), the columns by decreasing list length; thread block b takes items b,
// b + grid, b + 2·grid, ... Per item the producer warp walks o's list (its lanes read 32 entries
// at a time, and the next item's range ahead) and copies, per block k, the A strip [256, bs] at
// column in(k)·bs and the weight block W[k] [bs, bs] into one stage; the two consumer warpgroups
// each multiply 128 of the rows, as two m64 tiles sharing the weight block:
//
//   acc [64, bs] += A_strip[rows, :] · W[k]        fwd: W[k] MN-major (rows of W are k)
//   acc [64, bs] += A_strip[rows, :] · W[k]ᵀ       dx:  W[k] K-major  (rows of W are n)
//
// and store acc (f32) in the output dtype straight from registers while the producer already
// fills the stages of their next item. One wgmma group stays in flight: a stage is released
// (its empty barrier arrived) once the group after it was issued and the group reading it retired.
//
// Block gradient (dW), bs 64. The work items are dw_wide_group (runs of up to four blocks of one
// block row, the longest first), handed to the thread blocks that are free through the layout's
// counter and an mbarrier ring as in the gather kernel: per 64-row step of n the producer copies the X strip [64, 64] and the dY strips of
// the group's block columns; each consumer warpgroup computes two of the blocks, with both
// operands MN-major and the X strip's descriptor shared,
//
//   acc [64, 64] += X_strip[t0 .. t0+64, :]ᵀ · dY_strip[t0 .. t0+64, :]
//
// Deterministic: each output element is summed by one thread, in list order (and in row order
// for dW), with no atomics.
#include "kernels/common/cuda/bsmm_sm90.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "core/error.h"
#include "kernels/common/cuda/bsmm_store.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/layout_tables.h"
#include "kernels/common/cuda/mma_sm80.cuh"
#include "kernels/common/cuda/wgmma_sm90.cuh"

namespace tessera {
namespace cuda {
namespace sm90 {
namespace {

constexpr int kThreads = 384;  // dW: producer warpgroup + two consumer warpgroups
constexpr int kConsumerWarps = 8;

/// Tiles of the gather kernel: kWGs consumer warpgroups (1 or 2), each kMTiles m64 tiles; TO the
/// output type.
template <int BS, int kWGs, int kMTiles, class TO>
struct GatherTile {
  static constexpr int kThreads = 128 * (1 + kWGs);  // a producer warpgroup and the consumers
  static constexpr int kBM = 64 * kWGs * kMTiles;    // rows per work item
  static constexpr int kRowBytes = BS * 2;           // one row of a strip or of a weight block
  static constexpr int kABytes = kBM * kRowBytes;    // A strip
  static constexpr int kWBytes = BS * kRowBytes;     // weight block
  static constexpr int kStageBytes = kABytes + kWBytes;
  // The output staging of each consumer warpgroup: its [64·kMTiles, BS] tile as boxes of rows of
  // 128 bytes (64 for bf16 at bs 32), swizzled like the TMA store that writes them out.
  static constexpr int kWgRows = 64 * kMTiles;
  static constexpr int kOutCols = 128 / static_cast<int>(sizeof(TO)) < BS ? 128 / static_cast<int>(sizeof(TO)) : BS;
  static constexpr int kOutRowBytes = kOutCols * static_cast<int>(sizeof(TO));
  static constexpr int kOutBoxBytes = kWgRows * kOutRowBytes;
  static constexpr int kStagingBytes = (BS / kOutCols) * kOutBoxBytes;
  // Up to 200 KB of stages and staging; 100 KB for the small tiles, so that two thread blocks
  // share an SM.
  static constexpr int kBudget = (kWGs == 1 ? 100 : 200) * 1024 - kWGs * kStagingBytes;
  static constexpr int kStages = kBudget / kStageBytes < 16 ? kBudget / kStageBytes : 16;
  static constexpr int kItemRing = 4;                // work items handed from the producer to the consumers
  // + staging, stage barriers and gates, item ring (int4 each) and its barriers, alignment
  static constexpr int kSmemBytes =
      kStages * kStageBytes + kWGs * kStagingBytes + 3 * kStages * 8 + kItemRing * (16 + 16) + 1024;
};

__device__ __forceinline__ uint8_t* align1024(uint8_t* p) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + 1023) & ~uintptr_t{1023});
}

/// Multiplies the weight block of a stage [BS, BS] by its gate in shared memory (the kConsumers
/// consumer threads together; elementwise, so the swizzle does not matter), then makes the
/// writes visible to the tensor cores and waits for all consumers.
template <class T, int kBytes, int kConsumers>
__device__ __forceinline__ void scale_block(uint8_t* block, float gate, int consumer_thread) {
  for (int off = consumer_thread * 16; off < kBytes; off += kConsumers * 16) {
    uint4 v = *reinterpret_cast<uint4*>(block + off);
    v.x = sm80::scale_pair<T>(v.x, gate);
    v.y = sm80::scale_pair<T>(v.y, gate);
    v.z = sm80::scale_pair<T>(v.z, gate);
    v.w = sm80::scale_pair<T>(v.w, gate);
    *reinterpret_cast<uint4*>(block + off) = v;
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
}

template <class T, class TO, int BS, bool kTransW, int kWGs, int kMTiles, bool kGated>
__global__ void __launch_bounds__(128 * (1 + kWGs), 1)
    gather_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_w,
                  const __grid_constant__ CUtensorMap map_out, GatherProduct p, int items) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tile = GatherTile<BS, kWGs, kMTiles, TO>;
  constexpr int kStages = Tile::kStages, kRowBytes = Tile::kRowBytes;
  constexpr int kRing = Tile::kItemRing;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align1024(smem_raw);
  uint8_t* staging = smem + kStages * Tile::kStageBytes;  // [kWGs][kStagingBytes]
  uint64_t* full = reinterpret_cast<uint64_t*>(staging + kWGs * Tile::kStagingBytes);
  uint64_t* empty = full + kStages;
  uint64_t* item_full = empty + kStages;
  uint64_t* item_empty = item_full + kRing;
  int4* ring = reinterpret_cast<int4*>(item_empty + kRing);  // (o, begin, end, row tile); o < 0: no more
  float* gates = reinterpret_cast<float*>(ring + kRing);     // [kStages]: the gate of each stage's block
  auto strip = [&](int s) { return smem + s * Tile::kStageBytes; };
  auto block = [&](int s) { return smem + s * Tile::kStageBytes + Tile::kABytes; };

  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 4 * kWGs);
    }
    for (int s = 0; s < kRing; ++s) {
      mbar_init(&item_full[s], 1);
      mbar_init(&item_empty[s], 4 * kWGs);
    }
    fence_barrier_init();
  }
  __syncthreads();

  const int tiles_m = static_cast<int>((p.n + Tile::kBM - 1) / Tile::kBM);
  if (wg == 0) {
    // Producer: warp 0. Lane 0 takes work items from the launch's counter (in order: the
    // longest lists first, so the thread blocks that finish early take the short ones), hands
    // each item to the consumers through the ring, and issues its copies; the lanes read the
    // item's list 32 entries at a time.
    if (threadIdx.x >= 32) return;
    if (lane == 0) {
      prefetch_tma_map(&map_a);
      prefetch_tma_map(&map_w);
    }
    int taken = blockIdx.x;  // the first item without a round trip; then gridDim.x + the counter
    int it = 0;
    for (int n = 0;; ++n) {
      const int item = __shfl_sync(0xffffffffu, taken, 0);
      int4 w = make_int4(-1, 0, 0, 0);
      if (item < items) {
        int oi;
        work_item(item, tiles_m, p.outs, p.row_group, oi, w.w);
        w.x = p.work[3 * oi];
        w.y = p.work[3 * oi + 1];
        w.z = p.work[3 * oi + 2];
        if (lane == 0) taken = static_cast<int>(gridDim.x) + atomicAdd(p.counter, 1);  // in flight meanwhile
      }
      if (lane == 0) {
        const int slot = n % kRing;
        mbar_wait(&item_empty[slot], ((n / kRing) & 1) ^ 1);
        ring[slot] = w;
        mbar_arrive(&item_full[slot]);  // releases the ring entry to the consumers
      }
      if (w.x < 0) {
        // Every item is taken once each thread block took one past the end: the last of them to
        // get here sets the counter back to 0 for the next launch (ordered after this one).
        if (lane == 0 && atomicAdd(p.counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
          p.counter[0] = 0;
          p.counter[1] = 0;
        }
        break;
      }
      const int begin = w.y, end = w.z, mt = w.w;
      for (int base = begin; base < end; base += 32) {
        const int q = base + lane;
        int k = 0, in = 0;
        float gv = 1.f;
        if (q < end) {
          k = p.list ? p.list[q] : q;
          in = p.list_in[q];
          if constexpr (kGated) gv = to_acc(static_cast<const T*>(p.gate)[k]);
        }
        const int count = min(32, end - base);
        for (int j = 0; j < count; ++j, ++it) {
          const int kj = __shfl_sync(0xffffffffu, k, j), inj = __shfl_sync(0xffffffffu, in, j);
          const float gj = __shfl_sync(0xffffffffu, gv, j);
          if (lane == 0) {
            const int s = it % kStages;
            mbar_wait(&empty[s], ((it / kStages) & 1) ^ 1);
            if constexpr (kGated) gates[s] = gj;  // published by the arrive below
            mbar_arrive_expect_tx(&full[s], Tile::kStageBytes);
            tma_load_2d(strip(s), &map_a, &full[s], inj * BS, mt * Tile::kBM);
            tma_load_2d(block(s), &map_w, &full[s], 0, kj * BS);
          }
        }
      }
    }
    return;
  }

  // Consumers: warpgroup c = wg - 1 multiplies rows 64·kMTiles·c .. of each item, one m64 tile
  // per kMTiles (they share the weight block's descriptor).
  const int c = wg - 1, warp = (threadIdx.x / 32) % 4, g = lane / 4, t = lane % 4;
  TO* out = static_cast<TO*>(p.out);
  int it = 0;
  for (int n = 0;; ++n) {
    const int slot = n % kRing;
    mbar_wait(&item_full[slot], (n / kRing) & 1);
    const int4 w = ring[slot];
    __syncwarp();
    if (lane == 0) mbar_arrive(&item_empty[slot]);
    if (w.x < 0) break;
    const int o = w.x, begin = w.y, end = w.z, mt = w.w;
    const int64_t m0 = static_cast<int64_t>(mt) * Tile::kBM;
    const int steps = end - begin;
    float acc[kMTiles][BS / 2];
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
      for (int i = 0; i < BS / 2; ++i) acc[mi][i] = 0.f;
    for (int step = 0; step < steps; ++step, ++it) {
      const int s = it % kStages;
      mbar_wait(&full[s], (it / kStages) & 1);
      if constexpr (kGated) scale_block<T, Tile::kWBytes, 128 * kWGs>(block(s), gates[s], threadIdx.x - 128);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BS / 16; ++kk) {
        // dx: B (k = j, n = i) = W[k][i][j], rows of W are n: K-major;
        // fwd: B (k = i, n = j) = W[k][i][j], rows of W are k: MN-major
        const uint64_t db = kTransW ? make_desc(block(s) + kk * 32, 16, 8 * kRowBytes, kRowBytes)
                                    : make_desc(block(s) + kk * 16 * kRowBytes, Tile::kWBytes, 8 * kRowBytes, kRowBytes);
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
          const uint64_t da =
              make_desc(strip(s) + (c * kMTiles + mi) * 64 * kRowBytes + kk * 32, 16, 8 * kRowBytes, kRowBytes);
          Wgmma<T, BS>::template run<0, kTransW ? 0 : 1>(acc[mi], da, db, step > 0 || kk > 0);
        }
      }
      wgmma_commit();
      wgmma_wait<1>();  // the group of the previous step retired: its stage is free
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) fence_operands(acc[mi]);
      if (step > 0 && lane == 0) mbar_arrive(&empty[(it - 1) % kStages]);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) fence_operands(acc[mi]);
    if (steps > 0 && lane == 0) mbar_arrive(&empty[(it - 1) % kStages]);

    if (p.accumulate) {  // out += acc: read-modify-write straight from the registers
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
        for (int j = 0; j < BS / 8; ++j) {
          const int64_t col = static_cast<int64_t>(o) * BS + 8 * j + 2 * t;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int64_t row = m0 + (c * kMTiles + mi) * 64 + warp * 16 + g + 8 * h;
            if (row < p.n)
              store_pair(out + row * p.out_cols + col, acc[mi][4 * j + 2 * h], acc[mi][4 * j + 2 * h + 1], true);
          }
        }
      continue;
    }
    // out = acc: the warpgroup writes its tile into its staging (swizzled as the TMA store reads
    // it) and one thread stores it with TMA, which runs on while the next item's products start.
    uint8_t* mine = staging + c * Tile::kStagingBytes;
    const bool leader = threadIdx.x % 128 == 0;
    if (leader) bulk_wait_read<0>();  // the previous item's store has read the staging
    named_barrier(2 + c, 128);
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
      for (int j = 0; j < BS / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = mi * 64 + warp * 16 + g + 8 * h, col = 8 * j + 2 * t;
          const int box = col / Tile::kOutCols, bc = col % Tile::kOutCols;
          const int byte = row * Tile::kOutRowBytes + bc * static_cast<int>(sizeof(TO));
          const int swizzled = byte ^ (((byte >> 7) & (Tile::kOutRowBytes / 16 - 1)) << 4);
          store_pair(reinterpret_cast<TO*>(mine + box * Tile::kOutBoxBytes + swizzled), acc[mi][4 * j + 2 * h],
                     acc[mi][4 * j + 2 * h + 1], false);
        }
    fence_async_shared();
    named_barrier(2 + c, 128);
    if (leader) {
#pragma unroll
      for (int box = 0; box < BS / Tile::kOutCols; ++box)
        tma_store_2d(&map_out, mine + box * Tile::kOutBoxBytes, o * BS + box * Tile::kOutCols,
                     static_cast<int>(m0) + c * Tile::kWgRows);
      bulk_commit();
    }
  }
  if (threadIdx.x % 128 == 0) bulk_wait<0>();  // the last store is complete before the block ends
#else
  __trap();  // compiled for another architecture: the host never launches this
#endif
}

// ---- dW (bs 64) ----

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
      if (step > 0 && lane == 0) mbar_arrive(&empty[(it - 1) % kStages]);
    }
    if (mine > 0) {
      wgmma_wait<0>();
#pragma unroll
      for (int b = 0; b < kPerWG; ++b) fence_operands(acc[b]);
    }
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

// ---- host side ----

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    TS_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    TS_CHECK(q == cudaDriverEntryPointSuccess && f, DeviceError,
             "bsmm: the CUDA driver has no cuTensorMapEncodeTiled (TMA)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

/// A 2-D row-major [rows, cols] tensor map (bf16, f16 or f32) with boxes of [box_rows, box_cols],
/// swizzled by the box's row length (128, 64 or 32 bytes).
CUtensorMap tensor_map(const void* base, DType dt, uint64_t rows, uint64_t cols, uint32_t box_rows, uint32_t box_cols) {
  CUtensorMap map;
  const uint64_t elem = dt == DType::f32 ? 4 : 2;
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {cols * elem};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUtensorMapDataType type = dt == DType::f32    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : dt == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult r = encode_tiled()(
      &map, type, 2, const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      box_cols * elem == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
      : box_cols * elem == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                              : CU_TENSOR_MAP_SWIZZLE_32B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TS_CHECK(r == CUDA_SUCCESS, DeviceError,
           "bsmm: cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << ") for a [" << rows << ", " << cols
                                                   << "] tensor");
  return map;
}

/// Thread blocks of `kernel` that fit on one multiprocessor, times the multiprocessors.
template <auto Kernel>
int persistent_grid(int smem_bytes, int threads = kThreads) {
  static std::atomic<int> cached{0};
  int v = cached.load(std::memory_order_relaxed);
  if (v > 0) return v;
  int device = 0, sms = 0, per_sm = 0;
  TS_CUDA_CHECK(cudaGetDevice(&device));
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  TS_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  TS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel, threads, smem_bytes));
  v = sms * (per_sm > 0 ? per_sm : 1);
  cached.store(v, std::memory_order_relaxed);
  return v;
}

std::atomic<uint64_t> g_launches{0};

template <class T, class TO, int BS, bool kTrans, int kWGs, int kMTiles, bool kGated>
void launch(const GatherProduct& p, cudaStream_t stream) {
  using Tile = GatherTile<BS, kWGs, kMTiles, TO>;
  const int64_t tiles_m = (p.n + Tile::kBM - 1) / Tile::kBM, items = tiles_m * p.outs;
  TS_CHECK(items < INT32_MAX, ShapeError, "bsmm: " << p.n << " rows are too many for one launch");
  const CUtensorMap map_a = tensor_map(p.a, p.in_dtype, p.n, p.a_cols, Tile::kBM, BS);
  const CUtensorMap map_w = tensor_map(p.w, p.in_dtype, static_cast<uint64_t>(p.nnz) * BS, BS, BS, BS);
  const CUtensorMap map_out = tensor_map(p.out, p.out_dtype, p.n, p.out_cols, Tile::kWgRows, Tile::kOutCols);
  constexpr auto kernel = &gather_kernel<T, TO, BS, kTrans, kWGs, kMTiles, kGated>;
  const int grid =
      static_cast<int>(std::min<int64_t>(items, persistent_grid<kernel>(Tile::kSmemBytes, Tile::kThreads)));
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(map_a, map_w, map_out, p, static_cast<int>(items));
  TS_CUDA_LAUNCH_CHECK((kTrans ? "bsmm_dx" : "bsmm"));
  g_launches.fetch_add(1, std::memory_order_relaxed);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
bool half_dtype(DType dt) { return dt == DType::bf16 || dt == DType::f16; }

template <class F>
void dispatch_types(DType in, DType out, F&& f) {
  auto with_out = [&](auto tin) {
    if (out == DType::f32) return f(tin, TypeTag<float>{});
    return f(tin, tin);
  };
  if (in == DType::bf16) return with_out(TypeTag<__nv_bfloat16>{});
  return with_out(TypeTag<__half>{});
}

}  // namespace

namespace {

bool device_ok(int device) {
  int major = 0, minor = 0;
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}

}  // namespace

bool gather_supported(const GatherProduct& p, int device) {
  return (p.bs == 16 || p.bs == 32 || p.bs == 64) && half_dtype(p.in_dtype) &&
         (p.out_dtype == p.in_dtype || p.out_dtype == DType::f32) && aligned16(p.a) && aligned16(p.w) &&
         aligned16(p.out) && p.n <= INT32_MAX && device_ok(device);
}

bool gradient_supported(const BlockGradient& g, int device) {
  return g.bs == 64 && half_dtype(g.in_dtype) && (g.out_dtype == g.in_dtype || g.out_dtype == DType::f32) &&
         aligned16(g.x) && aligned16(g.dy) && aligned16(g.dw) && g.n > 0 && g.n <= INT32_MAX && device_ok(device);
}

uint64_t launch_count() { return g_launches.load(std::memory_order_relaxed); }

void gather_product(const GatherProduct& p, cudaStream_t stream) {
  if (p.n == 0 || p.outs == 0) return;
  dispatch_types(p.in_dtype, p.out_dtype, [&](auto tin, auto tout) {
    using T = typename decltype(tin)::type;
    using TO = typename decltype(tout)::type;
    auto run = [&](auto bs, auto trans, auto wgs, auto mtiles) {
      constexpr int BS = decltype(bs)::value;
      constexpr bool kTrans = decltype(trans)::value;
      constexpr int kWGs = decltype(wgs)::value, kMTiles = decltype(mtiles)::value;
      if (p.gate) return launch<T, TO, BS, kTrans, kWGs, kMTiles, true>(p, stream);
      return launch<T, TO, BS, kTrans, kWGs, kMTiles, false>(p, stream);
    };
    // Rows per work item by N: 256 (two consumer warpgroups of two m64 tiles sharing each weight
    // block: on the H200 1.35-1.7x faster than 128 with the TMA-store epilogue, bs 32 and 64,
    // densities 0.1-1) when N passes 128; 128 when N passes 64; else 64 (one consumer
    // warpgroup: an LSTM step's batch; 2x faster there than 256-row items of mostly padding).
    using I1 = std::integral_constant<int, 1>;
    using I2 = std::integral_constant<int, 2>;
    auto with_rows = [&](auto bs, auto trans) {
      if (p.n > 128) return run(bs, trans, I2{}, I2{});
      if (p.n > 64) return run(bs, trans, I2{}, I1{});
      return run(bs, trans, I1{}, I1{});
    };
    auto with_bs = [&](auto trans) {
      if (p.bs == 64) return with_rows(std::integral_constant<int, 64>{}, trans);
      if (p.bs == 32) return with_rows(std::integral_constant<int, 32>{}, trans);
      return with_rows(std::integral_constant<int, 16>{}, trans);
    };
    if (p.transpose_w) return with_bs(std::true_type{});
    return with_bs(std::false_type{});
  });
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
