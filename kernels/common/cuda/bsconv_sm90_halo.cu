// The Hopper (sm_90a) kernel of bsconv and bsconv_dx in halo mode (see bsmm_sm90.h): the input
// box of a stored block is copied into shared memory once and read by all of the filter's taps.
//
// Work items are (output block column o, output tile) pairs as in the gather kernel
// (bsmm_sm90_gather.cu), tiles as in conv_tiles.h. Per list entry (stored block k, input block
// column in(k)) the producer copies the halo box of A, the tile's positions widened by the
// filter's reach (ConvTiles::halo: 10 × 10 × 4 positions for an 8 × 8 × 4 tile of a 3x3 filter),
// into one of two halo slots, and the taps' weight blocks W[k, t] [bs, bs] into a ring of stages.
// Per tap each consumer warpgroup multiplies the tap's rows of the box (tile row r reads
// ConvTiles::halo_row(r) + tap_rows(t)) by the weight block with register-A wgmma, A loaded
// by ldmatrix (any offset and pitch; shared-memory descriptors, where each m64 tile's rows are
// consecutive in the box, were as fast at bs 64 and 20% slower at bs 32, and were removed):
//
//   acc [64, bs] += halo[rows of tap t] · W[k, t]        fwd (W MN-major)
//   acc [64, bs] += halo[rows of tap t] · W[k, t]ᵀ       dx  (W K-major)
//
// So each input box crosses from L2 to shared memory once per block instead of once per tap
// (9x fewer bytes for a 3x3 filter): the reuse that lifts a convolution above the matmul's
// bs-flops-per-byte bound. A weight stage is released when the products that read it retired, a
// halo slot when its block's last tap's did. The tile goes out as in the gather kernel (a TMA
// store of each consumer warpgroup's box).
//
// A step is short (at bs 32, 128 cycles of tensor work per thread block), so what a step costs
// besides its products decides the speed (docs/convolution.md, "the profile"). The steps are
// walked with counters (ring_cursor.h: no division on the way), the taps' row offsets come from
// a table made once per thread block, and each step's products run while the next step's
// barriers are waited for and its A fragments loaded (two buffers). At block
// sizes 16 and 32 large calls take tall tiles of 512 rows (four m64 tiles per consumer
// warpgroup), which spread a step's fixed cost over twice the products. In entry mode (kEntry,
// the default where two slots fit) a slot holds a list entry's halo box and all of its taps'
// weight blocks under one barrier, so the per-tap steps wait for nothing and release nothing:
// one wait and one release per entry. At bs 32 a 3x3 filter of dilation 1 over two spatial axes
// takes the strip form (kStrip: conv_tiles.h's strip_row), whose warps' four m64 tiles are four
// image rows, so that one A fragment serves the taps of several rows.
//
// Deterministic: each output element is summed by one thread, over the list's blocks in order
// and each block's taps in a fixed order, with no atomics on data.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/common/cuda/bsmm_sm90.h"
#include "kernels/common/cuda/bsmm_sm90_common.cuh"
#include "kernels/common/cuda/mma_sm80.cuh"
#include "kernels/common/ring_cursor.h"

namespace tessera {
namespace cuda {
namespace sm90 {

std::atomic<uint64_t> g_halo_launches{0};
std::atomic<uint64_t> g_halo_tall_launches{0};
std::atomic<uint64_t> g_halo_entry_launches{0};
std::atomic<uint64_t> g_halo_strip_launches{0};

namespace {

constexpr int kSmemLimit = 227 * 1024;

/// f(integral_constant<int, i>) for i = 0 .. N - 1, each i a compile-time constant.
template <class F, int... I>
__device__ __forceinline__ void unroll_each(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
__device__ __forceinline__ void unroll(F&& f) {
  unroll_each(f, std::make_integer_sequence<int, N>{});
}

template <int BS, int kWGs, int kMTiles, class TO>
struct HaloTile {
  static constexpr int kThreads = 128 * (1 + kWGs);  // a producer warpgroup and the consumers
  static constexpr int kRowBytes = BS * 2;           // one position's channels of a block
  static constexpr int kWBytes = BS * kRowBytes;     // a weight block
  static constexpr int kWgRows = 64 * kMTiles;
  static constexpr int kOutCols = 128 / static_cast<int>(sizeof(TO)) < BS ? 128 / static_cast<int>(sizeof(TO)) : BS;
  static constexpr int kOutRowBytes = kOutCols * static_cast<int>(sizeof(TO));
  static constexpr int kOutBoxBytes = kWgRows * kOutRowBytes;
  static constexpr int kStagingBytes = (BS / kOutCols) * kOutBoxBytes;
  static constexpr int kItemRing = 4;
  static constexpr int kMaxStages = 16;
  // halo slots: per tap the producer copies one block ahead (3 or 4 slots measured the same on
  // the H200); in entry mode as many as fit, up to four
  static constexpr int kTapSlots = 2, kMaxSlots = 4;
  // barriers (halo 2·4, stages 2·16, item ring 2·4), the item ring's int4s and the taps' row
  // offsets (at most 64 ints: conv_tiles_support), rounded up
  static constexpr int kBarrierBytes = 1024;
  static_assert((2 * kMaxSlots + 2 * kMaxStages + 2 * kItemRing) * 8 + kItemRing * 16 + 64 * 4 <= kBarrierBytes,
                "the barriers, item ring and tap table outgrow their part of shared memory");
};

/// Where the parts of the dynamic shared memory lie (byte offsets from its 1024-aligned start).
struct HaloSmem {
  int halo_bytes;  ///< one halo slot, a multiple of 1024 (the swizzle repeats every 1024 bytes)
  int slots;       ///< halo slots
  int stages;      ///< weight stages (entry mode: slots · taps, slot-major, a slot's taps in order)
  int w_at, staging_at, barriers_at, total;
};

/// The shared memory of a call: per tap, two halo slots and as many weight stages as fit (at most
/// 16); in entry mode as many slots (at most 4) as fit with all of their entries' weight blocks.
template <int BS, int kWGs, int kMTiles, class TO, bool kEntry>
HaloSmem halo_smem(const ConvTiles& ct) {
  using Tile = HaloTile<BS, kWGs, kMTiles, TO>;
  constexpr int kLimit = kSmemLimit;
  HaloSmem m{};
  m.halo_bytes = (ct.halo_rows() * Tile::kRowBytes + 1023) / 1024 * 1024;
  const int fixed = 1024 + kWGs * Tile::kStagingBytes + Tile::kBarrierBytes;
  if (kEntry) {
    const int per_slot = m.halo_bytes + ct.taps * Tile::kWBytes;  // + at most 1023 of rounding in all
    m.slots = std::min(Tile::kMaxSlots, (kLimit - fixed - 2048) / per_slot);
    m.stages = m.slots * ct.taps;
  } else {
    m.slots = Tile::kTapSlots;
    m.stages = std::min(Tile::kMaxStages, (kLimit - fixed - m.slots * m.halo_bytes - 1024) / Tile::kWBytes);
  }
  m.w_at = m.slots * m.halo_bytes;
  m.staging_at = m.w_at + (m.stages * Tile::kWBytes + 1023) / 1024 * 1024;
  m.barriers_at = m.staging_at + kWGs * Tile::kStagingBytes;
  m.total = m.barriers_at + Tile::kBarrierBytes + 1024;  // + the alignment of the start
  return m;
}

// kStrip (entry mode, tall tiles, a 3x3 filter): conv_tiles.h's strip form, ct's boxes TileBoxes::strip's.
template <class T, class TO, int BS, bool kTransW, int kWGs, int kMTiles, bool kEntry, bool kStrip = false>
__global__ void __launch_bounds__(128 * (1 + kWGs), 1)
    halo_kernel(const __grid_constant__ CUtensorMap map_halo, const __grid_constant__ CUtensorMap map_w,
                const __grid_constant__ CUtensorMap map_out, GatherProduct p, int items, ConvTiles ct, HaloSmem sm) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tile = HaloTile<BS, kWGs, kMTiles, TO>;
  constexpr int kRowBytes = Tile::kRowBytes, kRing = Tile::kItemRing;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align1024(smem_raw);
  uint8_t* staging = smem + sm.staging_at;  // [kWGs][kStagingBytes]
  uint64_t* halo_full = reinterpret_cast<uint64_t*>(smem + sm.barriers_at);
  uint64_t* halo_empty = halo_full + Tile::kMaxSlots;
  uint64_t* full = halo_empty + Tile::kMaxSlots;  // per-tap stages (not in entry mode)
  uint64_t* empty = full + Tile::kMaxStages;
  uint64_t* item_full = empty + Tile::kMaxStages;
  uint64_t* item_empty = item_full + kRing;
  int4* ring = reinterpret_cast<int4*>(item_empty + kRing);  // (o, begin, end, tile); o < 0: no more
  int32_t* tap_row = reinterpret_cast<int32_t*>(ring + kRing);  // [taps]: ConvTiles::tap_rows of each tap
  auto halo = [&](int h) { return smem + h * sm.halo_bytes; };
  auto wblock = [&](int s) { return smem + sm.w_at + s * Tile::kWBytes; };
  const int stages = sm.stages, taps = ct.taps, slots = sm.slots;

  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    init_barrier_pairs(halo_full, halo_empty, slots, 4 * kWGs);
    if (!kEntry) init_barrier_pairs(full, empty, stages, 4 * kWGs);
    init_barrier_pairs(item_full, item_empty, kRing, 4 * kWGs);
    fence_barrier_init();
  }
  if (threadIdx.x < taps) tap_row[threadIdx.x] = ct.tap_rows(threadIdx.x);  // the only divisions of the walk
  __syncthreads();

  // Tall tiles (4 m64 tiles per consumer warpgroup): the producer warpgroup gives registers to
  // the consumers' accumulators and two A buffers, as the gather kernel's column pairs do.
  constexpr bool kTall = kMTiles == 4;
  if (wg == 0) {
    // Producer: one thread takes the items (the first by blockIdx.x, then the layout's counter),
    // hands each to the consumers and copies, per list entry, the halo box and the taps' blocks
    // (entry mode: into the slot's stages, completing the slot's barrier with the box).
    if constexpr (kTall) setmaxnreg_dec<40>();
    if (threadIdx.x != 0) return;
    prefetch_tma_map(&map_halo);
    prefetch_tma_map(&map_w);
    const uint32_t halo_tx = static_cast<uint32_t>(ct.halo_rows() * kRowBytes + (kEntry ? taps * Tile::kWBytes : 0));
    RingCursor stage, slot, item_slot;
    for (int item = blockIdx.x;;) {
      int4 w = make_int4(-1, 0, 0, 0);
      if (item < items) {
        int oi;
        work_item(item, ct.total_tiles, p.outs, oi, w.w);
        w.x = p.work[3 * oi];
        w.y = p.work[3 * oi + 1];
        w.z = p.work[3 * oi + 2];
      }
      mbar_wait(&item_empty[item_slot.slot], item_slot.phase ^ 1);
      ring[item_slot.slot] = w;
      mbar_arrive(&item_full[item_slot.slot]);
      item_slot.next(kRing);
      if (w.x < 0) break;
      int32_t at[ConvTiles::kAxes];
      ct.halo_origin(w.w, at);
      for (int q = w.y; q < w.z; ++q) {
        const int k = p.list ? p.list[q] : q, in = p.list_in[q];
        mbar_wait(&halo_empty[slot.slot], slot.phase ^ 1);
        mbar_arrive_expect_tx(&halo_full[slot.slot], halo_tx);
        tma_load_5d(halo(slot.slot), &map_halo, &halo_full[slot.slot], in * BS, at);
        for (int t = 0, row = k * taps * BS; t < taps; ++t, row += BS) {
          if constexpr (kEntry) {  // stage = slot · taps + t: the stages advance with the slots
            tma_load_2d(wblock(stage.slot), &map_w, &halo_full[slot.slot], 0, row);
          } else {
            mbar_wait(&empty[stage.slot], stage.phase ^ 1);
            mbar_arrive_expect_tx(&full[stage.slot], Tile::kWBytes);
            tma_load_2d(wblock(stage.slot), &map_w, &full[stage.slot], 0, row);
          }
          stage.next(stages);
        }
        slot.next(slots);
      }
      item = static_cast<int>(gridDim.x) + atomicAdd(p.counter, 1);
    }
    // Every item is taken once each thread block took one past the end: the last of them sets the
    // counter back to 0 for the next launch (see gather_kernel).
    if (atomicAdd(p.counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
      p.counter[0] = 0;
      p.counter[1] = 0;
    }
    return;
  }

  if constexpr (kTall) setmaxnreg_inc<232>();
  // Consumers: warpgroup c multiplies tile rows 64·kMTiles·c .., m64 tile mi at rows + 64·mi;
  // warp w of the warpgroup its rows 16w .. 16w + 15 of each. Lane l loads row l % 16 of them
  // (ldmatrix x4: lanes 0-15 the k columns 0-7 of a k16 slice, lanes 16-31 columns 8-15).
  const int c = wg - 1, warp = (threadIdx.x / 32) % 4;
  int lane_row, lane_chunk0;  // conv_tiles.h's halo_a_lane: the lane's row of the warp's 16, its chunk at kk = 0
  halo_a_lane(lane, 0, lane_row, lane_chunk0);
  static_assert(!kStrip || (kEntry && kMTiles == 4 && kWGs == 2), "the strip form: entry mode, tall tiles");
  // strip form: the halo row of this lane's row of m64 tile 0 at tap (0, 0); tile mi at tap (dy, dx)
  // reads strip_base + (mi + dy)·halo[0] + dx (strip_row)
  [[maybe_unused]] const int strip_base = kStrip ? ct.halo_row(strip_row(ct, c, warp, 0, lane_row)) : 0;
  [[maybe_unused]] const int hx = ct.halo[0];
  // the halo row of this lane's row of each m64 tile at tap 0
  int base_row[kMTiles];
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) base_row[mi] = ct.halo_row(c * Tile::kWgRows + mi * 64 + warp * 16 + lane_row);
  // The address of (halo row, this lane's chunk of k16 slice kk) in a halo box, swizzled as TMA wrote it.
  auto a_off = [&](int row) { return swizzled_offset(row, lane_chunk0, kRowBytes); };  // at slice 0
  // A step: tap `walk.tap` of a list entry, its halo box in slot h, its weight block in stage s.
  struct Step {
    int h, shift, s;
    bool last_tap;  // the entry's last tap: its products retired free the halo slot too
  };
  HaloStepWalk walk;  // over the launch's steps, across work items
  // Waits for the walk's step (its halo box at the entry's first tap, and its weight block), then
  // moves the walk on.
  auto begin_step = [&]() {
    const int shift = ld_shared(tap_row + walk.tap);  // issued before the waits: its latency under theirs
    if (walk.first_tap()) mbar_wait(&halo_full[walk.slot.slot], walk.slot.phase);
    if (!kEntry) mbar_wait(&full[walk.stage.slot], walk.stage.phase);
    const Step st{walk.slot.slot, shift, walk.stage.slot, walk.tap == taps - 1};
    walk.next(taps, stages, slots);
    return st;
  };
  // B as the gather kernel's: dx K-major (rows of W are n), fwd MN-major (rows of W are k).
  const uint64_t b_desc0 = kTransW ? make_desc(wblock(0), 16, 8 * kRowBytes, kRowBytes)
                                    : make_desc(wblock(0), Tile::kWBytes, 8 * kRowBytes, kRowBytes);
  auto b_desc = [&](int s, int kk) {
    const uint32_t bytes = static_cast<uint32_t>(s * Tile::kWBytes + kk * (kTransW ? 32 : 16 * kRowBytes));
    return (b_desc0 & 0xFFFFFFFF00000000ull) | static_cast<uint32_t>(static_cast<uint32_t>(b_desc0) + (bytes >> 4));
  };
  // Lane 0 releases a step's weight stage (not in entry mode), and after its entry's last tap the
  // halo slot (the whole warp's reads of them came first: callers __syncwarp), where `any` (a
  // step was issued); predicated arrivals, no branch.
  auto release = [&](const Step& st, bool any) {
    if (!kEntry) mbar_arrive_if(&empty[st.s], any && lane == 0);
    mbar_arrive_if(&halo_empty[st.h], any && lane == 0 && st.last_tap);
  };
  for (int n = 0;; ++n) {
    const int4 w = receive_item<kRing>(n, item_full, item_empty, ring, lane);
    if (w.x < 0) break;
    const int o = w.x, mt = w.w, steps = (w.z - w.y) * taps;
    float acc[kMTiles][BS / 2];
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
      for (int i = 0; i < BS / 2; ++i) acc[mi][i] = 0.f;
    // Step e multiplies the tap's rows of the box (halo row base_row + shift on) by the weight
    // block. Its products run while the next step's barriers are waited for and its A fragments
    // loaded; a step's stage (and its entry's slot after the last tap) is released
    // once its products retired, one step later.
    auto retire_previous = [&](bool any, const Step& prev) {
      wgmma_wait<1>();  // the products of the step before the one just issued retired
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) fence_operands(acc[mi]);
      __syncwarp();
      release(prev, any);
    };
    Step prev{}, cur{};
    // A from registers that ldmatrix writes, two steps' fragments: step e + 1's are loaded while
    // step e's products run (into the buffer of step e - 1, whose products retired first).
    // Unrolled by two, so that each buffer is named at compile time (registers).
    uint32_t a0[BS / 16][kMTiles][4], a1[BS / 16][kMTiles][4];
    auto load_a = [&](uint32_t(&a)[BS / 16][kMTiles][4], const Step& st) {
      const uint8_t* box = halo(st.h);
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
        const int off0 = a_off(base_row[mi] + st.shift);
#pragma unroll
        for (int kk = 0; kk < BS / 16; ++kk) sm80::ldmatrix_x4(a[kk][mi], box + swizzled_slice(off0, kk));
      }
    };
    auto issue = [&](const uint32_t(&a)[BS / 16][kMTiles][4], const Step& st) {
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BS / 16; ++kk) {
        const uint64_t db = b_desc(st.s, kk);
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) WgmmaRS<T, BS>::template run<kTransW ? 0 : 1>(acc[mi], a[kk][mi], db);
      }
      wgmma_commit();
    };
    // The strip form's: all products in flight retired; lane 0 frees halo slot `slot` (< 0: none) after the
    // whole warp's reads of it.
    auto fence_acc = [&]() {
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) fence_operands(acc[mi]);
    };
    auto free_slot = [&](int slot) {
      __syncwarp();
      mbar_arrive_if(&halo_empty[slot < 0 ? 0 : slot], slot >= 0 && lane == 0);
    };
    if constexpr (kStrip) {
      // Per list entry: one wait for its slot, then per column offset dx and k16 slice kk a group: the
      // warp's A fragments of halo rows strip_base + f·hx + dx (f = 0..5) and the 12 products of the
      // filter's column dx that read them (tile mi at tap row dy takes fragment mi + dy). A group's
      // loads go to the buffer of the group before the last, which retired (six groups an entry: the
      // buffers alternate across entries too). Both slices' fragments in one group, 96 registers,
      // left ptxas too few of the 168 for asynchronous wgmmas (C7512).
      uint32_t f0[6][4], f1[6][4];
      int in_flight = -1;  // the slot of the entry whose last products may still run
      auto run_entry = [&]() {
        const int h = walk.slot.slot;
        mbar_wait(&halo_full[h], walk.slot.phase);
        const uint8_t* box = halo(h);
        unroll<3 * (BS / 16)>([&](auto gc) {
          constexpr int g = decltype(gc)::value, dx = g / (BS / 16), kk = g % (BS / 16);
          auto group = [&](uint32_t(&fr)[6][4]) {
#pragma unroll
            for (int f = 0; f < 6; ++f)
              sm80::ldmatrix_x4(fr[f], box + swizzled_slice(a_off(strip_base + f * hx + dx), kk));
            wgmma_fence();
            unroll<3>([&](auto dyc) {
              constexpr int dy = decltype(dyc)::value;
              // the tap of (dy, dx): the forward's taps run along the box, bsconv_dx's against it
              constexpr int t = kTransW ? (2 - dy) * 3 + (2 - dx) : dy * 3 + dx;
              const uint64_t db = b_desc(h * 9 + t, kk);
#pragma unroll
              for (int mi = 0; mi < 4; ++mi) WgmmaRS<T, BS>::template run<kTransW ? 0 : 1>(acc[mi], fr[mi + dy], db);
            });
            wgmma_commit();
          };
          if constexpr (g % 2 == 0) {
            group(f0);
          } else {
            group(f1);
          }
          wgmma_wait<1>();  // the group before retired (the entry before's last at g = 0)
          fence_acc();
          if constexpr (g == 0) free_slot(in_flight);
        });
        in_flight = h;
        walk.slot.next(slots);
      };
      for (int q = w.y; q < w.z; ++q) run_entry();
      wgmma_wait<0>();
      fence_acc();
      free_slot(in_flight);
    } else {
      if (steps > 0) {
        cur = begin_step();
        load_a(a0, cur);
      }
      for (int e = 0; e < steps; e += 2) {
        issue(a0, cur);
        retire_previous(e > 0, prev);
        prev = cur;
        if (e + 1 == steps) break;
        cur = begin_step();
        load_a(a1, cur);
        issue(a1, cur);
        retire_previous(true, prev);
        prev = cur;
        if (e + 2 == steps) break;
        cur = begin_step();
        load_a(a0, cur);
      }
      wgmma_wait<0>();
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) fence_operands(acc[mi]);
      __syncwarp();
      release(prev, steps > 0);
    }

    // out = acc through the warpgroup's staging and a TMA store of its box (as gather_kernel)
    uint8_t* mine = staging + c * Tile::kStagingBytes;
    const bool leader = threadIdx.x % 128 == 0;
    if (leader) bulk_wait_read<0>();  // the previous item's store has read the staging
    named_barrier(2 + c, 128);
    if constexpr (kStrip) {
      // The warpgroup's store box holds its rows in box order (strip_row): those of this lane's
      // accumulator rows lane / 4 and lane / 4 + 8 of m64 tile 0, tile mi's mi·box[0] further on.
      // (Made here per item: kept in registers across the loop, they cost it 97 instructions.)
      const int out[2] = {strip_row(ct, c, warp, 0, lane / 4) - c * Tile::kWgRows,
                          strip_row(ct, c, warp, 0, lane / 4 + 8) - c * Tile::kWgRows};
      stage_tile_rows<TO, kMTiles, BS, Tile::kOutCols>(mine, acc, lane,
                                                       [&](int mi, int r) { return out[r / 8] + mi * ct.box[0]; });
    } else {
      stage_tile<TO, kMTiles, BS, Tile::kOutCols>(mine, acc, warp, lane);
    }
    fence_async_shared();
    named_barrier(2 + c, 128);
    if (leader) {
      int32_t at[ConvTiles::kAxes], extent[ConvTiles::kAxes];
      ct.store_box(mt, c, kWGs, at, extent);
#pragma unroll
      for (int box = 0; box < BS / Tile::kOutCols; ++box)
        tma_store_5d(&map_out, mine + box * Tile::kOutBoxBytes, o * BS + box * Tile::kOutCols, at);
      bulk_commit();
    }
  }
  if (threadIdx.x % 128 == 0) bulk_wait<0>();  // the last store is complete before the block ends
#else
  __trap();  // compiled for another architecture: the host never launches this
#endif
}

template <class T, class TO, int BS, bool kTrans, int kWGs, int kMTiles, bool kEntry, bool kStrip = false>
void launch(const GatherProduct& p, const ConvTiles& ct, cudaStream_t stream) {
  using Tile = HaloTile<BS, kWGs, kMTiles, TO>;
  const HaloSmem sm = halo_smem<BS, kWGs, kMTiles, TO, kEntry>(ct);
  const int64_t items = static_cast<int64_t>(ct.total_tiles) * p.outs;
  TS_CHECK(items < INT32_MAX, ShapeError, (kTrans ? "bsconv_dx" : "bsconv") << ": too many tiles for one launch");
  int32_t half[ConvTiles::kAxes], origin[ConvTiles::kAxes];
  ct.store_box(0, 0, kWGs, origin, half);
  const CUtensorMap map_halo = conv_map(p.a, p.in_dtype, p.a_cols, ct.a_ext, BS, ct.halo);
  const CUtensorMap map_w = tensor_map(p.w, p.in_dtype, static_cast<uint64_t>(p.nnz) * BS, BS, BS, BS);
  const CUtensorMap map_out = conv_map(p.out, p.out_dtype, p.out_cols, ct.ext, Tile::kOutCols, half);
  constexpr auto kernel = &halo_kernel<T, TO, BS, kTrans, kWGs, kMTiles, kEntry, kStrip>;
  const int grid = static_cast<int>(std::min<int64_t>(items, persistent_grid<kernel>(sm.total, Tile::kThreads)));
  kernel<<<grid, Tile::kThreads, sm.total, stream>>>(map_halo, map_w, map_out, p, static_cast<int>(items), ct, sm);
  TS_CUDA_LAUNCH_CHECK((kTrans ? "bsconv_dx (halo)" : "bsconv (halo)"));
  g_launches.fetch_add(1, std::memory_order_relaxed);
  g_conv_launches.fetch_add(1, std::memory_order_relaxed);
  g_halo_launches.fetch_add(1, std::memory_order_relaxed);
  if (kMTiles == 4) g_halo_tall_launches.fetch_add(1, std::memory_order_relaxed);
  if (kEntry) g_halo_entry_launches.fetch_add(1, std::memory_order_relaxed);
  if (kStrip) g_halo_strip_launches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

uint64_t halo_launch_count() { return g_halo_launches.load(std::memory_order_relaxed); }
uint64_t halo_tall_launch_count() { return g_halo_tall_launches.load(std::memory_order_relaxed); }
uint64_t halo_entry_launch_count() { return g_halo_entry_launches.load(std::memory_order_relaxed); }
uint64_t halo_strip_launch_count() { return g_halo_strip_launches.load(std::memory_order_relaxed); }

namespace {

// Rows per tile of the halo kernel: the gather kernel's (with_gather_tile), except that at block
// sizes 16 and 32 a call of at least kTallFrom rows takes 512-row tiles (two consumer warpgroups
// of four m64 tiles, A in registers): a step's fixed cost (its barrier waits, the walk, the
// weight block's descriptors) is then spread over twice the products. TESSERA_BSCONV_HALO_ROWS
// = 256 or 512 forces the choice where it applies (the lab's switch).
constexpr int64_t kTallFrom = 16384;

bool tall_tiles(const GatherProduct& p) {
  if (!(p.bs == 16 || p.bs == 32) || p.n <= 128) return false;
  if (const char* e = std::getenv("TESSERA_BSCONV_HALO_ROWS")) {
    const bool ok = std::strcmp(e, "256") == 0 || std::strcmp(e, "512") == 0;
    TS_CHECK(ok, ValueError, "TESSERA_BSCONV_HALO_ROWS must be 256 or 512, not '" << e << "'");
    return std::strcmp(e, "512") == 0;
  }
  return p.n >= kTallFrom;
}

/// Whether the halo kernel's tiles for (BS, kWGs, kMTiles) fit ci: each halo extent one TMA box,
/// two weight stages at least (entry mode: two slots), the shared memory a thread block may have.
template <int BS, int kWGs, int kMTiles, bool kEntry>
bool halo_fits(const GatherProduct& p, const ConvIndex& ci, int64_t batch, bool dx) {
  const ConvTiles ct = conv_tiles(ci, batch, dx, 64 * kWGs * kMTiles, TileBoxes::halo);
  const HaloSmem sm = p.out_dtype == DType::f32
                          ? halo_smem<BS, kWGs, kMTiles, float, kEntry>(ct)
                          : halo_smem<BS, kWGs, kMTiles, __half, kEntry>(ct);  // bf16: the same sizes
  return ct.halo_fits() && sm.stages >= 2 && sm.slots >= 2 && sm.total <= kSmemLimit;
}

// Entry mode (a slot per list entry with all of its taps' weight blocks, one barrier wait and one
// release per entry instead of per tap), where two slots fit: the default (TESSERA_BSCONV_HALO_ENTRY
// unset or 1); 0 never (the lab's switch). On the H100 at bs 32, N 64 × 56 × 56, density 0.25:
// forward 0.252 -> 0.236 ms, dgrad 0.231 -> 0.208 in one call (docs/convolution.md).
bool entry_asked() { return env_switch("TESSERA_BSCONV_HALO_ENTRY", "0", "1", true); }

// The strip form (TESSERA_BSCONV_HALO_STRIP unset or 1, the default; 0 never, the lab's switch): at bs 32 with
// tall tiles in entry mode, a 3x3 filter of dilation 1 in two spatial axes, each entry's nine taps unrolled
// over conv_tiles.h's strip tiles, where a warp's A fragment serves two wgmmas on average (half the A bytes
// from shared memory a product). H100, density 0.25, both rounds of one call (docs/convolution.md): forward
// and dgrad 0.64-0.74x the time of the walk at N 64 × 56 × 56 and N 32 × 28 × 28, 0.69-0.82x that of the
// compile-time taps loop without strips (deleted).
bool strip_asked() { return env_switch("TESSERA_BSCONV_HALO_STRIP", "0", "1", true); }

/// Whether the strip form takes cs (conv_tiles(..., 512, TileBoxes::strip)): strip boxes, every tap t at
/// the (dy, dx) the kernel gives it, the halo's extents one copy each, two entry-mode slots in shared memory.
template <class TO, bool kTrans>
bool strip_fits(const ConvTiles& cs) {
  if (!strip_tiles_apply(cs.ext, 512) || cs.taps != 9 || !cs.halo_fits()) return false;
  for (int32_t t = 0; t < 9; ++t) {
    int32_t dy = 0, dx = 0;
    if (!strip_tap(cs, t, dy, dx) || t != (kTrans ? (2 - dy) * 3 + (2 - dx) : dy * 3 + dx)) return false;
  }
  const HaloSmem sm = halo_smem<32, 2, 4, TO, true>(cs);
  return sm.slots >= 2 && sm.total <= kSmemLimit;
}

/// Calls f(bs, transpose_w, warpgroups, m64 tiles, entry) with the halo kernel's tile for p and ci:
/// tall tiles where tall_tiles asks for them and they fit, else the gather kernel's; entry mode
/// where entry_asked and it fits that tile (bs 16 and 32: at bs 64 one slot fits).
template <class F>
void with_halo_tile(const GatherProduct& p, const ConvIndex& ci, int64_t batch, F&& f) {
  const bool entry = entry_asked(), tall = tall_tiles(p);
  with_gather_tile(p, [&](auto bs, auto trans, auto wgs, auto mtiles) {
    constexpr int BS = decltype(bs)::value, kWGs = decltype(wgs)::value;
    constexpr bool kTrans = decltype(trans)::value;
    auto with_entry = [&](auto m) {
      constexpr int kM = decltype(m)::value;
      if (entry && halo_fits<BS, kWGs, kM, true>(p, ci, batch, kTrans)) return f(bs, trans, wgs, m, std::true_type{});
      return f(bs, trans, wgs, m, std::false_type{});
    };
    if constexpr (BS <= 32 && kWGs == 2) {
      if (tall && halo_fits<BS, kWGs, 4, false>(p, ci, batch, kTrans))
        return with_entry(std::integral_constant<int, 4>{});
    }
    return with_entry(mtiles);
  });
}

}  // namespace

bool halo_pays(const GatherProduct& p, const ConvIndex& ci, int64_t batch) {
  if (ci.taps < 2) return false;  // a 1x1 filter has nothing to reuse
  bool fits = false;
  with_halo_tile(p, ci, batch, [&](auto bs, auto trans, auto wgs, auto mtiles, auto entry) {
    constexpr int BS = decltype(bs)::value, kWGs = decltype(wgs)::value, kMTiles = decltype(mtiles)::value;
    fits = halo_fits<BS, kWGs, kMTiles, decltype(entry)::value>(p, ci, batch, decltype(trans)::value);
  });
  return fits;
}

void gather_conv_halo(const GatherProduct& p, const ConvIndex& ci, int64_t batch, cudaStream_t stream) {
  if (p.n == 0 || p.outs == 0) return;
  dispatch_types(p.in_dtype, p.out_dtype, [&](auto tin, auto tout) {
    using T = typename decltype(tin)::type;
    using TO = typename decltype(tout)::type;
    with_halo_tile(p, ci, batch, [&](auto bs, auto trans, auto wgs, auto mtiles, auto entry) {
      constexpr int BS = decltype(bs)::value, kWGs = decltype(wgs)::value, kMTiles = decltype(mtiles)::value;
      constexpr bool kTrans = decltype(trans)::value, kEntry = decltype(entry)::value;
      if constexpr (kEntry && BS == 32 && kWGs == 2 && kMTiles == 4) {
        if (ci.taps == 9 && strip_asked()) {
          const ConvTiles cs = conv_tiles(ci, batch, kTrans, 512, TileBoxes::strip);
          if (strip_fits<TO, kTrans>(cs))
            return launch<T, TO, BS, kTrans, kWGs, kMTiles, kEntry, true>(p, cs, stream);
        }
      }
      launch<T, TO, BS, kTrans, kWGs, kMTiles, kEntry>(
          p, conv_tiles(ci, batch, kTrans, 64 * kWGs * kMTiles, TileBoxes::halo), stream);
    });
  });
}

}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
