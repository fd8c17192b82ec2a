// The Hopper (sm_90a) kernel of bsmm and bsmm_dx (see bsmm_sm90.h): wgmma on operands that the
// bulk tensor copy engine (TMA) brings into a ring of shared-memory stages guarded by
// mbarriers, one producer warp and one or two consumer warpgroups, a persistent grid.
//
// Work items are (output block column o, tile of rows) pairs: the columns by decreasing list
// length, row tiles in groups of two that visit every column before the next group (work_item in
// bsmm_store.cuh). Each thread block takes its first item by its index, later ones from the
// layout's device counter, so blocks that finish early take more. The producer warp hands each
// item to the consumers through an mbarrier ring, reads the item's list 32 entries at a time and
// copies, per block k, the A strip [rows, bs] at column in(k)·bs and the weight block W[k]
// [bs, bs] into one stage. Each consumer warpgroup multiplies 64·kMTiles of the rows, as m64
// tiles sharing the weight block:
//
//   acc [64, bs] += A_strip[rows, :] · W[k]        fwd: W[k] MN-major (rows of W are k)
//   acc [64, bs] += A_strip[rows, :] · W[k]ᵀ       dx:  W[k] K-major  (rows of W are n)
//
// scaling the block by its gate in shared memory first when gated. One wgmma group stays in
// flight: a stage is released once the group after it was issued and the group reading it
// retired. The tile goes out through shared memory by TMA stores, which run on while the next
// item's products start (the accumulate mode adds to global memory from the registers).
//
// Deterministic: each output element is summed by one thread in list order, with no atomics on
// data (the counter only decides which thread block computes an item).
#include "kernels/common/cuda/bsmm_sm90.h"

#include "kernels/common/cuda/bsmm_sm90_common.cuh"
#include "kernels/common/cuda/mma_sm80.cuh"

namespace tessera {
namespace cuda {
namespace sm90 {

std::atomic<uint64_t> g_launches{0};

namespace {

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
  // Up to 224 KB of stages and staging (of the 227 KB a thread block may have: bs 64 with an f32
  // output, autocast's form, gets 4 stages instead of 3 under 200 KB); 100 KB for the small
  // tiles, so that two thread blocks share an SM.
  static constexpr int kBudget = (kWGs == 1 ? 100 : 224) * 1024 - kWGs * kStagingBytes;
  static constexpr int kStages = kBudget / kStageBytes < 16 ? kBudget / kStageBytes : 16;
  static constexpr int kItemRing = 4;                // work items handed from the producer to the consumers
  // + staging, stage barriers and gates, item ring (int4 each) and its barriers, alignment
  static constexpr int kSmemBytes =
      kStages * kStageBytes + kWGs * kStagingBytes + 3 * kStages * 8 + kItemRing * (16 + 16) + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a thread block may have");
};


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
        work_item(item, tiles_m, p.outs, oi, w.w);
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
      // The whole warp's reads of the previous stage come before lane 0 releases it.
      __syncwarp();
      if (step > 0 && lane == 0) mbar_arrive(&empty[(it - 1) % kStages]);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) fence_operands(acc[mi]);
    __syncwarp();
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


}  // namespace

bool gather_supported(const GatherProduct& p, int device) {
  return (p.bs == 16 || p.bs == 32 || p.bs == 64) && half_dtype(p.in_dtype) &&
         (p.out_dtype == p.in_dtype || p.out_dtype == DType::f32) && aligned16(p.a) && aligned16(p.w) &&
         aligned16(p.out) && p.n <= INT32_MAX && device_ok(device);
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


}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
