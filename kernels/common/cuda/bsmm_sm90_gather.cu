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
// Column pairs (kCols = 2, bs 32 and 64, 256-row items): a work item covers two output block
// columns of one row tile (2j and 2j+1, or for nn::LSTM's gate layouts a column and its twin in
// the next gate, c and c + q: layout_tables.h's pair_list), and its list is the union of their
// lists by input block (PairLists). A step copies one A strip and both columns' weight blocks side
// by side, [bs, 2·bs] (a block a column does not have is a copy from past the end of W: zeros),
// and multiplies them with one wgmma.m64n(2·bs)k16: twice the flops per byte of A. It pays where
// the two lists overlap (the all-blocks layout, and the gate layouts' twins, whose lists are the
// same: every strip serves both columns); the rule is pairs_pay below. A missing block adds 0·A
// to its column, which leaves the sum's bits unchanged (for finite A), so both forms give the
// same bits.
//
// Column quads (kCols = 4, fwd at bs 32, 256-row items; the lab's TESSERA_BSMM_QUADS=1): nn::LSTM's
// gate layouts list the same block rows for the four gates' columns c, c + q, c + 2q, c + 3q, so a
// work item covers all four (gate_quad_lists.h): a step copies one A strip [256, 32] and the
// entry's four weight blocks side by side [32, 128] and multiplies them with one wgmma.m64n128k16,
// 24 KB a step for 256 x 128 outputs where pairs copy 20 KB for 256 x 64 (x·W_x of the sparse LSTM
// layers is bound by those copies' L2 traffic: 0.53 ms at sparse H 4096 1/16 with pairs, 0.86
// with single columns, on the H100). The consumers' accumulators double (2 m64 tiles x 64).
//
// Deterministic: each output element is summed by one thread in list order, with no atomics on
// data (the counter only decides which thread block computes an item).
#include "kernels/common/cuda/bsmm_sm90.h"

#include <cstdlib>
#include <cstring>

#include "kernels/common/cuda/bsmm_sm90_common.cuh"
#include "kernels/common/cuda/mma_sm80.cuh"

namespace tessera {
namespace cuda {
namespace sm90 {

std::atomic<uint64_t> g_launches{0};
std::atomic<uint64_t> g_pair_launches{0};
std::atomic<uint64_t> g_quad_launches{0};
std::atomic<uint64_t> g_conv_launches{0};

namespace {

/// Column pairs take a call when they copy at most this fraction of the bytes that single
/// columns copy (pairs_pay).
constexpr double kPairBytes = 0.8;

/// 32 list entries of a work item, handed from the producer warpgroup's scheduling warp to its
/// copying warp (gather_kernel).
template <int kCols>
struct Chunk {
  int4 head;              ///< (o, first entry of this chunk, end entry, row tile); o < 0: no more items
  int first;              ///< 1 for the item's first chunk
  int in[32];             ///< input block of each entry
  int tap[32];            ///< convolution: each entry's filter tap
  int k[kCols][32];       ///< weight blocks (-1: a pair's missing one)
  float gate[kCols][32];  ///< their gates (gated kernels)
};
// Chunks in the ring: one, released once its copies are issued, so that the scheduling warp holds
// at most the next item (items taken early would unbalance the end of the launch).
constexpr int kChunks = 1;

/// Tiles of the gather kernel: kWGs consumer warpgroups (1 or 2), each kMTiles m64 tiles, kCols
/// output block columns per item (1, or 2: column pairs); TO the output type.
template <int BS, int kWGs, int kMTiles, class TO, int kCols>
struct GatherTile {
  static constexpr int kThreads = 128 * (1 + kWGs);  // a producer warpgroup and the consumers
  static constexpr int kBM = 64 * kWGs * kMTiles;    // rows per work item
  static constexpr int kBN = BS * kCols;             // output columns per work item
  static constexpr int kRowBytes = BS * 2;           // one row of a strip or of a weight block
  static constexpr int kABytes = kBM * kRowBytes;    // A strip
  static constexpr int kWBytes = BS * kRowBytes;     // weight block
  static constexpr int kStageBytes = kABytes + kCols * kWBytes;
  // The output staging of each consumer warpgroup: its [64·kMTiles, kBN] tile as boxes of rows
  // of 128 bytes (64 for bf16 at bs 32), swizzled like the TMA store that writes them out. A box
  // never spans two output block columns: a pair's members need not be neighbours (pair_list).
  static constexpr int kWgRows = 64 * kMTiles;
  static constexpr int kOutCols = 128 / static_cast<int>(sizeof(TO)) < BS ? 128 / static_cast<int>(sizeof(TO)) : BS;
  static constexpr int kOutRowBytes = kOutCols * static_cast<int>(sizeof(TO));
  static constexpr int kOutBoxBytes = kWgRows * kOutRowBytes;
  static constexpr int kStagingBytes = (kBN / kOutCols) * kOutBoxBytes;
  // Up to 224 KB of stages and staging (of the 227 KB a thread block may have: bs 64 with an f32
  // output, autocast's form, gets 4 stages instead of 3 under 200 KB); 100 KB for the small
  // tiles, so that two thread blocks share an SM.
  static constexpr int kBudget = (kWGs == 1 ? 100 : 224) * 1024 - kWGs * kStagingBytes;
  static constexpr int kStages = kBudget / kStageBytes < 16 ? kBudget / kStageBytes : 16;
  static constexpr int kItemRing = 4;                // work items handed from the producer to the consumers
  // + staging, stage barriers and gates, item ring (int4 each) and its barriers, chunks and
  // their barriers, alignment
  static constexpr int kSmemBytes = kStages * kStageBytes + kWGs * kStagingBytes + (2 + kCols) * kStages * 8 +
                                    kItemRing * (16 + 16) + kChunks * (static_cast<int>(sizeof(Chunk<kCols>)) + 16) +
                                    1024;
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a thread block may have");
};


/// Multiplies the kCols weight blocks of a stage [BS, BS] (kBytes each, side by side) by their
/// gates in shared memory (the kConsumers consumer threads together; elementwise, so the swizzle
/// does not matter), then makes the writes visible to the tensor cores and waits for all consumers.
template <class T, int kBytes, int kCols, int kConsumers>
__device__ __forceinline__ void scale_blocks(uint8_t* blocks, const float* gates, int consumer_thread) {
  for (int off = consumer_thread * 16; off < kCols * kBytes; off += kConsumers * 16) {
    const float gate = gates[off / kBytes];
    uint4 v = *reinterpret_cast<uint4*>(blocks + off);
    v.x = sm80::scale_pair<T>(v.x, gate);
    v.y = sm80::scale_pair<T>(v.y, gate);
    v.z = sm80::scale_pair<T>(v.z, gate);
    v.w = sm80::scale_pair<T>(v.w, gate);
    *reinterpret_cast<uint4*>(blocks + off) = v;
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
}

template <class T, class TO, int BS, bool kTransW, int kWGs, int kMTiles, bool kGated, int kCols, bool kConv>
__global__ void __launch_bounds__(128 * (1 + kWGs), 1)
    gather_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_w,
                  const __grid_constant__ CUtensorMap map_out, GatherProduct p, int items, ConvTiles ct) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tile = GatherTile<BS, kWGs, kMTiles, TO, kCols>;
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
  uint64_t* chunk_full = reinterpret_cast<uint64_t*>(ring + kRing);
  uint64_t* chunk_empty = chunk_full + kChunks;
  Chunk<kCols>* chunks = reinterpret_cast<Chunk<kCols>*>(chunk_empty + kChunks);
  float* gates = reinterpret_cast<float*>(chunks + kChunks);  // [kStages][kCols]: the gates of each stage's blocks
  auto strip = [&](int s) { return smem + s * Tile::kStageBytes; };
  auto block = [&](int s) { return smem + s * Tile::kStageBytes + Tile::kABytes; };

  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    init_barrier_pairs(full, empty, kStages, 4 * kWGs);
    init_barrier_pairs(item_full, item_empty, kRing, 4 * kWGs);
    for (int s = 0; s < kChunks; ++s) {
      mbar_init(&chunk_full[s], 32);
      mbar_init(&chunk_empty[s], 32);
    }
    fence_barrier_init();
  }
  __syncthreads();

  const int tiles_m = kConv ? ct.total_tiles : static_cast<int>((p.n + Tile::kBM - 1) / Tile::kBM);
  const int taps = kConv ? ct.taps : 1;  // a convolution's list: every block's entry once per tap
  const int outs = kCols == 4 ? p.quads : kCols == 2 ? p.pairs : p.outs;
  const int32_t* work = kCols == 4 ? p.quad_work : kCols == 2 ? p.pair_work : p.work;
  if (wg == 0) {
    // Producer warpgroup: warp 1 schedules, warp 0 copies. Warp 1 takes work items from the
    // launch's counter (in order: the longest lists first, so the thread blocks that finish early
    // take the short ones), reads each item's work entry and list and puts them, 32 list entries
    // at a time, into a ring of chunks in shared memory; warp 0 hands each item to the consumers
    // and issues the copies of its chunks. The scheduler works one chunk ahead, so the dependent
    // global loads of the next item (counter, work entry, list) stay off the copy path: on the
    // H200 1.04-1.19x on the transformer shape, up to 1.35x on the MLP shape's short lists.
    if constexpr (kWGs == 2 && kCols >= 2) setmaxnreg_dec<40>();  // the consumers' accumulators need more
    const int warp = threadIdx.x / 32;
    if (warp >= 2) return;
    int chunk = 0;  // chunks written (warp 1) or read (warp 0)
    if (warp == 1) {
      int taken = blockIdx.x;  // the first item without a round trip; then gridDim.x + the counter
      for (;;) {
        const int item = __shfl_sync(0xffffffffu, taken, 0);
        int4 w = make_int4(-1, 0, 0, 0);
        if (item < items) {
          int oi;
          work_item(item, tiles_m, outs, oi, w.w);
          w.x = work[3 * oi];
          w.y = work[3 * oi + 1] * taps;
          w.z = work[3 * oi + 2] * taps;
        }
        // One chunk per 32 entries, and one for an empty list or the end (so that warp 0 sees
        // every item): its header is (o, first entry, end entry, row tile), its entries the input
        // block, weight blocks (a pair's missing one: -1) and gates.
        for (int base = w.y;; base += 32) {
          const int q = base + lane;
          int in = 0, k[kCols], tap = 0;
          float gv[kCols];
#pragma unroll
          for (int cc = 0; cc < kCols; ++cc) k[cc] = -1, gv[cc] = 0.f;
          if (w.x >= 0 && q < w.z) {
            if constexpr (kCols == 4) {
#pragma unroll
              for (int cc = 0; cc < 4; ++cc) k[cc] = p.quad_entries[5 * q + 1 + cc];
              in = p.quad_entries[5 * q];
            } else if constexpr (kCols == 2) {
              in = p.pair_entries[3 * q];
              k[0] = p.pair_entries[3 * q + 1];
              k[1] = p.pair_entries[3 * q + 2];
            } else if constexpr (kConv) {
              // Entry q is tap q % taps of the block at list position q / taps: weight rows
              // (k·taps + tap)·bs of w [nnz, taps, bs, bs]
              const int pq = q / taps;
              tap = q - pq * taps;
              k[0] = (p.list ? p.list[pq] : pq) * taps + tap;
              in = p.list_in[pq];
            } else {
              k[0] = p.list ? p.list[q] : q;
              in = p.list_in[q];
            }
#pragma unroll
            for (int cc = 0; cc < kCols; ++cc)
              if (kGated && k[cc] >= 0) gv[cc] = to_acc(static_cast<const T*>(p.gate)[k[cc]]);
          }
          Chunk<kCols>& ch = chunks[chunk % kChunks];
          mbar_wait(&chunk_empty[chunk % kChunks], ((chunk / kChunks) & 1) ^ 1);
          if (lane == 0) {
            ch.head = make_int4(w.x, base, w.z, w.w);
            ch.first = base == w.y;
          }
          ch.in[lane] = in;
          ch.tap[lane] = tap;
#pragma unroll
          for (int cc = 0; cc < kCols; ++cc) {
            ch.k[cc][lane] = k[cc];
            ch.gate[cc][lane] = gv[cc];
          }
          mbar_arrive(&chunk_full[chunk % kChunks]);  // every lane: its writes come before
          ++chunk;
          if (w.x < 0 || base + 32 >= w.z) break;
        }
        // The next item, taken once warp 0 started this one's last chunk (one item ahead)
        if (w.x >= 0 && lane == 0) taken = static_cast<int>(gridDim.x) + atomicAdd(p.counter, 1);
        if (w.x < 0) {
          // Every item is taken once each thread block took one past the end: the last of them
          // to get here sets the counter back to 0 for the next launch (ordered after this one).
          if (lane == 0 && atomicAdd(p.counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
            p.counter[0] = 0;
            p.counter[1] = 0;
          }
          return;
        }
      }
    }
    // Warp 0: the copies.
    if (lane == 0) {
      prefetch_tma_map(&map_a);
      prefetch_tma_map(&map_w);
    }
    int it = 0, items_seen = 0;
    for (;; ++chunk) {
      const Chunk<kCols>& ch = chunks[chunk % kChunks];
      mbar_wait(&chunk_full[chunk % kChunks], (chunk / kChunks) & 1);
      const int4 head = ch.head;
      const bool first = ch.first;
      const int in = ch.in[lane];
      int k[kCols];
      float gv[kCols];
#pragma unroll
      for (int cc = 0; cc < kCols; ++cc) {
        k[cc] = ch.k[cc][lane];
        gv[cc] = ch.gate[cc][lane];
      }
      const int o = head.x, base = head.y, end = head.z, mt = head.w;
      // Convolution: where lane's entry's box of A starts, the tile's origin moved by its tap (the
      // divisions once per chunk, in parallel, not per copy)
      int32_t a_at[ConvTiles::kAxes] = {0, 0, 0, 0};
      if constexpr (kConv)
        if (o >= 0) ct.a_origin(mt, ch.tap[lane], a_at);
      if (o < 0 || first) {
        // The item's first chunk (or the end): hand the item (o, begin, end, row tile) to the consumers.
        if (lane == 0) {
          const int slot = items_seen % kRing;
          mbar_wait(&item_empty[slot], ((items_seen / kRing) & 1) ^ 1);
          ring[slot] = head;
          mbar_arrive(&item_full[slot]);  // releases the ring entry to the consumers
        }
        ++items_seen;
        if (o < 0) break;
      }
      const int count = max(0, min(32, end - base));
      for (int j = 0; j < count; ++j, ++it) {
        const int inj = __shfl_sync(0xffffffffu, in, j);
        int kj[kCols];
        float gj[kCols];
#pragma unroll
        for (int cc = 0; cc < kCols; ++cc) {
          kj[cc] = __shfl_sync(0xffffffffu, k[cc], j);
          gj[cc] = __shfl_sync(0xffffffffu, gv[cc], j);
        }
        int32_t at[ConvTiles::kAxes] = {0, 0, 0, 0};  // convolution: entry j's box of A
        if constexpr (kConv)
#pragma unroll
          for (int a = 0; a < ConvTiles::kAxes; ++a) at[a] = __shfl_sync(0xffffffffu, a_at[a], j);
        if (lane == 0) {
          const int s = it % kStages;
          mbar_wait(&empty[s], ((it / kStages) & 1) ^ 1);
          if constexpr (kGated)
#pragma unroll
            for (int cc = 0; cc < kCols; ++cc) gates[s * kCols + cc] = gj[cc];  // published by the arrive below
          mbar_arrive_expect_tx(&full[s], Tile::kStageBytes);
          if constexpr (kConv) {  // the tile's box of A moved by the tap's offset
            tma_load_5d(strip(s), &map_a, &full[s], inj * BS, at);
          } else {
            tma_load_2d(strip(s), &map_a, &full[s], inj * BS, mt * Tile::kBM);
          }
          // A missing block reads rows past the end of W: the copy fills zeros
#pragma unroll
          for (int cc = 0; cc < kCols; ++cc)
            tma_load_2d(block(s) + cc * Tile::kWBytes, &map_w, &full[s], 0,
                        (kj[cc] >= 0 ? kj[cc] : static_cast<int>(p.nnz)) * BS);
        }
      }
      mbar_arrive(&chunk_empty[chunk % kChunks]);  // every lane: its reads came before; its copies are issued
    }
    return;
  }

  if constexpr (kWGs == 2 && kCols >= 2) setmaxnreg_inc<232>();  // [2 m64 tiles][kCols·bs / 2] accumulators
  // Consumers: warpgroup c = wg - 1 multiplies rows 64·kMTiles·c .. of each item, one m64 tile
  // per kMTiles (they share the weight block's descriptor).
  const int c = wg - 1, warp = (threadIdx.x / 32) % 4, g = lane / 4, t = lane % 4;
  TO* out = static_cast<TO*>(p.out);
  int it = 0;
  for (int n = 0;; ++n) {
    const int4 w = receive_item<kRing>(n, item_full, item_empty, ring, lane);
    if (w.x < 0) break;
    const int o = w.x, begin = w.y, end = w.z, mt = w.w;
    const int64_t m0 = static_cast<int64_t>(mt) * Tile::kBM;
    const int steps = end - begin;
    constexpr int kBN = Tile::kBN;
    // The output column of the item's column x (0 .. kBN): a pair's member x / BS is output block
    // column pair_list(o, x / BS, stride), a quad's is gate x / BS of gate-0 column o, o + (x / BS)·q
    // (x / BS is known at compile time where callers unroll).
    int64_t first_col = static_cast<int64_t>(o) * kBN, second_col = 0;
    if constexpr (kCols == 2) {
      first_col = static_cast<int64_t>(pair_list(o, 0, p.pair_stride)) * BS;
      second_col = static_cast<int64_t>(pair_list(o, 1, p.pair_stride)) * BS;
    }
    auto out_col = [&](int x) -> int64_t {
      if constexpr (kCols == 4) return (static_cast<int64_t>(o) + (x / BS) * p.quads) * BS + x % BS;
      if constexpr (kCols == 2) return (x < BS ? first_col : second_col) + x % BS;
      return first_col + x;
    };
    float acc[kMTiles][kBN / 2];
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
      for (int i = 0; i < kBN / 2; ++i) acc[mi][i] = 0.f;
    for (int step = 0; step < steps; ++step, ++it) {
      const int s = it % kStages;
      mbar_wait(&full[s], (it / kStages) & 1);
      if constexpr (kGated)
        scale_blocks<T, Tile::kWBytes, kCols, 128 * kWGs>(block(s), gates + s * kCols, threadIdx.x - 128);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BS / 16; ++kk) {
        // dx: B (k = j, n = i) = W[k][i][j], rows of W are n: K-major (a pair's second block
        //   is rows n = bs .. 2·bs);
        // fwd: B (k = i, n = j) = W[k][i][j], rows of W are k: MN-major (a pair's or quad's next
        //   block is the next atom along n, kWBytes further)
        const uint64_t db = kTransW ? make_desc(block(s) + kk * 32, 16, 8 * kRowBytes, kRowBytes)
                                    : make_desc(block(s) + kk * 16 * kRowBytes, Tile::kWBytes, 8 * kRowBytes, kRowBytes);
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
          const uint64_t da =
              make_desc(strip(s) + (c * kMTiles + mi) * 64 * kRowBytes + kk * 32, 16, 8 * kRowBytes, kRowBytes);
          Wgmma<T, kBN>::template run<0, kTransW ? 0 : 1>(acc[mi], da, db, step > 0 || kk > 0);
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

    if (p.bias) {  // + bias[col] on every row, to the f32 sums before their one rounding
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const int64_t col = out_col(8 * j + 2 * t);
        const float2 b = p.bias_f32 ? bias_pair(static_cast<const float*>(p.bias), col, p.out_cols)
                                    : bias_pair(static_cast<const TO*>(p.bias), col, p.out_cols);
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            acc[mi][4 * j + 2 * h] += b.x;
            acc[mi][4 * j + 2 * h + 1] += b.y;
          }
      }
    }
    if (p.accumulate) {  // out += acc: read-modify-write straight from the registers
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          const int64_t col = out_col(8 * j + 2 * t);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int64_t row = m0 + (c * kMTiles + mi) * 64 + warp * 16 + g + 8 * h;
            if (row < p.n && col < p.out_cols)  // a pair of an odd column count: the last has no second
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
    stage_tile<TO, kMTiles, kBN, Tile::kOutCols>(mine, acc, warp, lane);
    fence_async_shared();
    named_barrier(2 + c, 128);
    if (leader) {
      int32_t at[ConvTiles::kAxes] = {0, 0, 0, 0};
      if constexpr (kConv) {
        int32_t extent[ConvTiles::kAxes];  // the map's box: the same for every warpgroup
        ct.store_box(mt, c, kWGs, at, extent);
      }
#pragma unroll
      for (int box = 0; box < kBN / Tile::kOutCols; ++box) {
        const int col = static_cast<int>(out_col(box * Tile::kOutCols));
        if constexpr (kConv)
          tma_store_5d(&map_out, mine + box * Tile::kOutBoxBytes, col, at);
        else if (col < p.out_cols)  // a pair of an odd column count: the last has no second
          tma_store_2d(&map_out, mine + box * Tile::kOutBoxBytes, col, static_cast<int>(m0) + c * Tile::kWgRows);
      }
      bulk_commit();
    }
  }
  if (threadIdx.x % 128 == 0) bulk_wait<0>();  // the last store is complete before the block ends
#else
  __trap();  // compiled for another architecture: the host never launches this
#endif
}


// conv: the convolution whose tiles and offsets `conv` gives (conv_tiles.h; its rows per tile
// Tile::kBM), p.a and p.out channels-last activations, p.w [nnz·taps·bs, bs]; nullptr: a matmul.
template <class T, class TO, int BS, bool kTrans, int kWGs, int kMTiles, bool kGated, int kCols, bool kConv = false>
void launch(const GatherProduct& p, cudaStream_t stream, const ConvTiles* conv = nullptr) {
  using Tile = GatherTile<BS, kWGs, kMTiles, TO, kCols>;
  const int64_t tiles_m = kConv ? conv->total_tiles : (p.n + Tile::kBM - 1) / Tile::kBM;
  const int64_t items = tiles_m * (kCols == 4 ? p.quads : kCols == 2 ? p.pairs : p.outs);
  TS_CHECK(items < INT32_MAX, ShapeError, "bsmm: " << p.n << " rows are too many for one launch");
  CUtensorMap map_a, map_out;
  ConvTiles ct{};
  if constexpr (kConv) {
    ct = *conv;
    int32_t half[ConvTiles::kAxes], origin[ConvTiles::kAxes];
    ct.store_box(0, 0, kWGs, origin, half);
    map_a = conv_map(p.a, p.in_dtype, p.a_cols, ct.a_ext, BS, ct.box);
    map_out = conv_map(p.out, p.out_dtype, p.out_cols, ct.ext, Tile::kOutCols, half);
  } else {
    map_a = tensor_map(p.a, p.in_dtype, p.n, p.a_cols, Tile::kBM, BS);
    map_out = tensor_map(p.out, p.out_dtype, p.n, p.out_cols, Tile::kWgRows, Tile::kOutCols);
  }
  const CUtensorMap map_w = tensor_map(p.w, p.in_dtype, static_cast<uint64_t>(p.nnz) * BS, BS, BS, BS);
  constexpr auto kernel = &gather_kernel<T, TO, BS, kTrans, kWGs, kMTiles, kGated, kCols, kConv>;
  const int grid =
      static_cast<int>(std::min<int64_t>(items, persistent_grid<kernel>(Tile::kSmemBytes, Tile::kThreads)));
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(map_a, map_w, map_out, p, static_cast<int>(items), ct);
  TS_CUDA_LAUNCH_CHECK((kConv ? (kTrans ? "bsconv_dx" : "bsconv") : (kTrans ? "bsmm_dx" : "bsmm")));
  g_launches.fetch_add(1, std::memory_order_relaxed);
  if (kCols == 2) g_pair_launches.fetch_add(1, std::memory_order_relaxed);
  if (kCols == 4) g_quad_launches.fetch_add(1, std::memory_order_relaxed);
  if (kConv) g_conv_launches.fetch_add(1, std::memory_order_relaxed);
}


}  // namespace

bool conv_supported(const GatherProduct& p, const ConvIndex& ci, int device) {
  return conv_tiles_support(ci) && p.gate == nullptr && !p.accumulate && gather_supported(p, device);
}

bool gather_supported(const GatherProduct& p, int device) {
  return (p.bs == 16 || p.bs == 32 || p.bs == 64) && half_dtype(p.in_dtype) &&
         (p.out_dtype == p.in_dtype || p.out_dtype == DType::f32) && aligned16(p.a) && aligned16(p.w) &&
         aligned16(p.out) && aligned16(p.bias) && p.n <= INT32_MAX && device_ok(device);
}


uint64_t launch_count() { return g_launches.load(std::memory_order_relaxed); }
uint64_t pair_launch_count() { return g_pair_launches.load(std::memory_order_relaxed); }
uint64_t quad_launch_count() { return g_quad_launches.load(std::memory_order_relaxed); }
uint64_t conv_launch_count() { return g_conv_launches.load(std::memory_order_relaxed); }

bool pairs_pay(const GatherProduct& p) {
  if (!(p.bs == 32 || p.bs == 64) || p.n <= 128 || p.out_dtype != p.in_dtype || !p.pair_work || p.pairs == 0)
    return false;
  const char* e = std::getenv("TESSERA_BSMM_PAIRS");
  if (e && std::strcmp(e, "0") == 0) return false;
  if (e && std::strcmp(e, "1") == 0) return true;
  // Bytes copied per 256-row tile: single columns nnz · (strip + block), pairs steps · (strip + 2
  // blocks); pairs when they copy at most kPairBytes of that.
  const double strip = 256.0 * p.bs * 2, block = 2.0 * p.bs * p.bs;
  return static_cast<double>(p.pair_steps) * (strip + 2 * block) <= kPairBytes * static_cast<double>(p.nnz) * (strip + block);
}

bool quads_take(const GatherProduct& p) {
  return p.quads > 0 && p.quad_work && p.bs == 32 && !p.transpose_w && !p.gate && p.n > 128 &&
         p.out_dtype == p.in_dtype;
}

void gather_product(const GatherProduct& p, cudaStream_t stream) {
  if (p.n == 0 || p.outs == 0) return;
  const bool quads = quads_take(p);
  const bool pairs = pairs_pay(p);
  dispatch_types(p.in_dtype, p.out_dtype, [&](auto tin, auto tout) {
    using T = typename decltype(tin)::type;
    using TO = typename decltype(tout)::type;
    auto run = [&](auto bs, auto trans, auto wgs, auto mtiles) {
      constexpr int BS = decltype(bs)::value;
      constexpr bool kTrans = decltype(trans)::value;
      constexpr int kWGs = decltype(wgs)::value, kMTiles = decltype(mtiles)::value;
      if constexpr (BS == 32 && !kTrans && kWGs == 2 && kMTiles == 2 && std::is_same_v<T, TO>) {
        if (quads) return launch<T, TO, BS, kTrans, kWGs, kMTiles, false, 4>(p, stream);
      }
      if constexpr (BS >= 32 && kWGs == 2 && kMTiles == 2 && std::is_same_v<T, TO>) {
        if (pairs) {
          if (p.gate) return launch<T, TO, BS, kTrans, kWGs, kMTiles, true, 2>(p, stream);
          return launch<T, TO, BS, kTrans, kWGs, kMTiles, false, 2>(p, stream);
        }
      }
      if (p.gate) return launch<T, TO, BS, kTrans, kWGs, kMTiles, true, 1>(p, stream);
      return launch<T, TO, BS, kTrans, kWGs, kMTiles, false, 1>(p, stream);
    };
    with_gather_tile(p, run);
  });
}


void gather_conv(const GatherProduct& p, const ConvIndex& ci, int64_t batch, cudaStream_t stream) {
  if (p.n == 0 || p.outs == 0) return;
  dispatch_types(p.in_dtype, p.out_dtype, [&](auto tin, auto tout) {
    using T = typename decltype(tin)::type;
    using TO = typename decltype(tout)::type;
    with_gather_tile(p, [&](auto bs, auto trans, auto wgs, auto mtiles) {  // rows per tile as for the matmul
      constexpr int BS = decltype(bs)::value;
      constexpr bool kTrans = decltype(trans)::value;
      constexpr int kWGs = decltype(wgs)::value, kMTiles = decltype(mtiles)::value;
      const ConvTiles ct = conv_tiles(ci, batch, kTrans, 64 * kWGs * kMTiles, TileBoxes::per_tap);
      launch<T, TO, BS, kTrans, kWGs, kMTiles, false, 1, true>(p, stream, &ct);
    });
  });
}


}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
