// The Hopper (sm_90a) kernel of bsconv_dw in halo mode (see bsmm_sm90.h), block sizes 16-64: the
// input box of each block of a run is copied once per tile and read by all of its taps.
//
//   dw[k, t] = Σ over the output positions of x[position's input at tap t, r-block]ᵀ · dY[position, c-block]
//
// Work items are (run, part) as in the dW kernel (bsmm_sm90_gradient.cu in convolution mode): a run
// is up to kG consecutive (block, tap) entries of one block column's list (the layout's
// cuda::conv_dw_runs of dw_halo_run_size: 256/bs at bs 16 and 32, 6 at bs 64), a part a range of the
// tiles. A tile is kPositions output positions (ConvTiles of 256 rows; 128 at bs 64). Per tile the
// producer copies the dY box [kPositions, bs] of the column and, for each distinct block of the run
// (its taps are consecutive entries: at most kG / taps + 2 blocks), the halo box of x
// (ConvTiles::halo: every position any tap of the tile reads) into one stage. A product stacks
// kPack = 64/bs entries along M, each consumer warpgroup kProducts products (2; 3 at bs 64); each
// consumer warp loads its 16 rows (channels of its entry's block) for a k16 slice of positions from
// the entry's halo box at the entry's tap (rows halo_row(r) + tap_rows(t)) with transposing ldmatrix,
// and multiplies them by the dY box (MN-major, shared-memory descriptor) with register-A wgmma:
//
//   acc [64, bs] += [x halo of e0 at tap t0 | e1 at t1 | ...][positions, :]ᵀ · dY[positions, :]
//
// Against the per-tap copies of the dW kernel (one [64, bs] x strip per entry and 64 positions)
// this copies about 2.2x fewer bytes per flop at bs 32 and 3x at bs 16 for a 3x3 filter; at bs 64,
// where a run of the dW kernel has 4 entries, runs of 6 over tiles of 128 positions copy 1.9-3x
// fewer (per 128 positions and 6 entries, a dY box of 16 KB and one or two halo boxes of 26 KB,
// against the dW kernel's 6 x strips and 1.5 dY strips of 16 KB each). The loads
// of a group of kGroupKk k16 slices go to registers while the group before multiplies (two buffers;
// ptxas keeps the wgmmas asynchronous as long as no instruction writes the registers of one in
// flight).
//
// Stores as the dW kernel: one part stores dw (k·taps + t), several parts their f32 partial sums
// that a second kernel adds in order. Deterministic: each element is summed by one thread, over
// the positions in tile order within a part and the parts in a fixed order; no atomics on data.
#include <algorithm>
#include <cstdlib>

#include "core/tensor.h"
#include "kernels/common/cuda/bsmm_sm90.h"
#include "kernels/common/cuda/bsconv_sm90_dw_common.cuh"
#include "kernels/common/cuda/bsmm_sm90_common.cuh"
#include "kernels/common/cuda/mma_sm80.cuh"
#include "kernels/common/ring_cursor.h"

namespace tessera {
namespace cuda {
namespace sm90 {
namespace {

// At bs 16 and 32: tiles of 256 output positions, two m64 products per consumer warpgroup, A loaded
// four k16 slices at a time. At bs 64 (kWide): tiles of 128 positions, three products per consumer
// warpgroup (runs of 6 entries, so that a 3x3 filter's 9 taps of a block column take two runs, 6 + 3,
// with 12 products for 9, where runs of 8 take 8 + 1 with 16, and 18 taps three full runs), A two
// slices at a time, the producer warpgroup's registers given to the consumers' 96 accumulators.
template <int BS>
struct DwHaloTile {
  static constexpr bool kWide = BS == 64;
  static constexpr int kPositions = kWide ? 128 : 256;  // output positions per tile
  static constexpr int kProducts = kWide ? 3 : 2;       // m64 products per consumer warpgroup
  static constexpr int kGroupKk = kWide ? 2 : 4;        // k16 slices whose A fragments are loaded together
  static constexpr int kRowBytes = 2 * BS;
  static constexpr int kDyBytes = kPositions * kRowBytes;  // the dY box
  static constexpr int kPack = 64 / BS;                   // entries per m64 product
  static constexpr int kG = 2 * kProducts * kPack;        // entries per run
  static constexpr int kItemRing = 4;
  static constexpr int kMaxStages = kDwMaxStages;
};

/// The stage layout: the dY box, then a halo slot for each distinct block of a run, at most.
template <int BS>
DwHaloSmem dw_halo_smem(const ConvTiles& ct) {
  using Tile = DwHaloTile<BS>;
  return dw_halo_layout(ct, Tile::kRowBytes, Tile::kDyBytes, std::min(Tile::kG, Tile::kG / ct.taps + 2));
}

template <class T, class TO, int BS>
__global__ void __launch_bounds__(kThreads, 1)
    dw_halo_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_dy,
                   BlockGradient p, int parts, int part_steps, float* __restrict__ partial, ConvTiles ct,
                   DwHaloSmem sm) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tile = DwHaloTile<BS>;
  constexpr int kRowBytes = Tile::kRowBytes, kPack = Tile::kPack, kRing = Tile::kItemRing;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align1024(smem_raw);
  auto dy_box = [&](int s) { return smem + s * sm.stage_bytes; };
  auto halo = [&](int s, int slot) { return smem + s * sm.stage_bytes + Tile::kDyBytes + slot * sm.halo_bytes; };
  const int taps = ct.taps, stages = sm.stages;

  constexpr int kPositions = Tile::kPositions, kProducts = Tile::kProducts, kGroupKk = Tile::kGroupKk;
  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
  const DwSync sync = dw_sync<kRing>(smem, sm.stage_bytes, stages, Tile::kMaxStages, kConsumerWarps);
  const int steps = ct.total_tiles;
  const int items = p.col_runs * parts;

  if (wg == 0) {
    // Producer: warp 0. Lane 0 takes items (part-major, as the dW kernel) and hands them to the
    // consumers; per tile it claims a stage and copies the dY box, and lane i < blocks copies the
    // halo box of the run's i-th block.
    if constexpr (Tile::kWide) setmaxnreg_dec<56>();  // at 40 the producer spilled 16 bytes
    if (threadIdx.x >= 32) return;
    produce_dw_halo<kRing, BS, Tile::kDyBytes>(map_x, map_dy, p, ct, items, part_steps, stages, sync, dy_box,
                                               halo);
    return;
  }

  // Consumer warpgroup c computes products P·c .. P·c + P − 1 of each item (P = kProducts): product
  // P·c + j stacks entries kPack·(P·c + j) .. along M; warp `warp` holds M rows 16·warp .. of it:
  // entry kPack·(P·c + j) + 16·warp / bs, channels 16·warp % bs .. of its block.
  if constexpr (Tile::kWide) setmaxnreg_inc<224>();  // 128 · 56 + 256 · 224 ≤ 65536
  const int c = wg - 1, warp = (threadIdx.x / 32) % 4, g = lane / 4, t4 = lane % 4;
  TO* dw = static_cast<TO*>(p.dw);
  // ldmatrix x4 trans (conv_tiles.h's halo_at_lane): the lane's position in a k16 slice and its
  // 8-channel chunk of the warp's 16 channels
  int lane_pos, lane_chunk;
  halo_at_lane(lane, 16 * warp % BS, lane_pos, lane_chunk);
  int lane_row[kPositions / 16];  // halo_row of the lane's position in each k16 slice
#pragma unroll
  for (int kk = 0; kk < kPositions / 16; ++kk) lane_row[kk] = ct.halo_row(16 * kk + lane_pos);
  auto a_at = [&](const uint8_t* box, int row) { return box + swizzled_offset(row, lane_chunk, kRowBytes); };
  RingCursor stage;
  for (int n = 0;; ++n) {
    const int4 w = receive_item<kRing>(n, sync.item_full, sync.item_empty, sync.ring, lane);
    if (w.y == 0) break;
    const int q0 = w.x, count = w.y, part = w.z;
    const int first = part * part_steps, last = min(steps, first + part_steps);
    // This warp's entry in each product: its halo slot and tap (an entry past the run's end
    // reads slot 0 at tap 0: rows computed and never stored, so that no wgmma sits under a branch).
    int hslot[kProducts], shift[kProducts];
#pragma unroll
    for (int j = 0; j < kProducts; ++j) {
      const int b = kPack * (kProducts * c + j) + 16 * warp / BS, q = q0 + b;
      hslot[j] = b < count ? q / taps - q0 / taps : 0;
      shift[j] = b < count ? ct.tap_rows(q % taps) : 0;
    }
    float acc[kProducts][BS / 2];
#pragma unroll
    for (int j = 0; j < kProducts; ++j)
#pragma unroll
      for (int i = 0; i < BS / 2; ++i) acc[j][i] = 0.f;
    // Per tile: four groups of kGroupKk k16 slices of positions. A group's A fragments are loaded
    // while the group before it multiplies (two register buffers, named at compile time); the
    // tile's last products retire before its stage is released. (Carrying the last group over
    // into the next tile, the first group's loads under it, made ptxas serialize every wgmma:
    // C7513.)
    constexpr int kGroups = kPositions / 16 / kGroupKk;
    for (int step = first; step < last; ++step, stage.next(stages)) {
      const int s = stage.slot;
      mbar_wait(&sync.full[s], stage.phase);
      uint32_t a[2][kGroupKk][kProducts][4];
      auto load_group = [&](uint32_t(&ag)[kGroupKk][kProducts][4], int kg) {
#pragma unroll
        for (int kk = 0; kk < kGroupKk; ++kk)
#pragma unroll
          for (int j = 0; j < kProducts; ++j)
            sm80::ldmatrix_x4_trans(ag[kk][j], a_at(halo(s, hslot[j]), lane_row[kg + kk] + shift[j]));
      };
      load_group(a[0], 0);
#pragma unroll
      for (int g4 = 0; g4 < kGroups; ++g4) {
        const int kg = g4 * kGroupKk;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kGroupKk; ++kk) {
          // B (k = position, n = j) = dY[position][j], MN-major as in the dW kernel
          const uint64_t db =
              make_desc(dy_box(s) + (kg + kk) * 16 * kRowBytes, Tile::kDyBytes, 8 * kRowBytes, kRowBytes);
#pragma unroll
          for (int j = 0; j < kProducts; ++j) WgmmaRS<T, BS>::template run<1>(acc[j], a[g4 % 2][kk][j], db);
        }
        wgmma_commit();
        wgmma_wait<1>();  // the group before this one retired: its buffer is free for the next group
#pragma unroll
        for (int j = 0; j < kProducts; ++j) fence_operands(acc[j]);
        if (g4 + 1 < kGroups) load_group(a[(g4 + 1) % 2], kg + kGroupKk);
      }
      wgmma_wait<0>();
#pragma unroll
      for (int j = 0; j < kProducts; ++j) fence_operands(acc[j]);
      // The whole warp's reads of the stage come before lane 0 releases it.
      __syncwarp();
      if (lane == 0) mbar_arrive(&sync.empty[s]);
    }
    // Row i of product j is row i % bs of entry kPack·(P·c + j) + i / bs: dw block (k·taps + tap).
#pragma unroll
    for (int j = 0; j < kProducts; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = warp * 16 + g + 8 * h, b = kPack * (kProducts * c + j) + i / BS;
        if (b >= count) continue;  // the same for every lane of the warp
        const int q = q0 + b;
        const int64_t k = static_cast<int64_t>(p.col_blocks[q / taps]) * taps + q % taps;
        store_dw_row<TO, BS>(dw, partial, parts, part, p.nnz, k, i % BS, acc[j], h, t4);
      }
  }
#else
  __trap();
#endif
}

template <class T, class TO, int BS>
void launch_dw_halo(const BlockGradient& g, const ConvTiles& ct, int device, cudaStream_t stream) {
  const DwHaloSmem sm = dw_halo_smem<BS>(ct);
  const CUtensorMap map_x = conv_map(g.x, g.in_dtype, g.C, ct.a_ext, BS, ct.halo);
  const CUtensorMap map_dy = conv_map(g.dy, g.in_dtype, g.K, ct.ext, BS, ct.box);
  constexpr auto kernel = &dw_halo_kernel<T, TO, BS>;
  const int persistent = persistent_grid<kernel>(sm.total, kThreads);
  const DwParts d = dw_parts(g, BS, ct.total_tiles, DwHaloTile<BS>::kPositions, persistent, device);
  const int grid = static_cast<int>(std::min<int64_t>(static_cast<int64_t>(g.col_runs) * d.parts, persistent));
  kernel<<<grid, kThreads, sm.total, stream>>>(map_x, map_dy, g, d.parts, d.part_steps, d.sums(), ct, sm);
  TS_CUDA_LAUNCH_CHECK("bsconv_dw (halo)");
  sum_dw_parts<TO>(g, BS, d, persistent, stream);
  g_launches.fetch_add(1, std::memory_order_relaxed);
  g_conv_launches.fetch_add(1, std::memory_order_relaxed);
  g_halo_launches.fetch_add(1, std::memory_order_relaxed);
}

// bs 64 in halo mode (the wide tiles: DwHaloTile's kWide), the default; TESSERA_BSCONV_DW_WIDE=0 leaves
// bs 64 to the per-tap dW kernel (the lab's switch).
bool wide_asked() { return env_switch("TESSERA_BSCONV_DW_WIDE", "0", "1", true); }

template <int BS>
bool dw_halo_fits(const ConvIndex& ci, int64_t batch) {
  const ConvTiles ct = conv_tiles(ci, batch, /*dx=*/false, DwHaloTile<BS>::kPositions, TileBoxes::halo);
  if (!ct.halo_fits()) return false;
  return dw_halo_smem<BS>(ct).fits();
}

}  // namespace

bool dw_halo_pays(const BlockGradient& g, const ConvIndex& ci, int64_t batch) {
  if (ci.taps < 2) return false;
  if (g.bs == 16) return dw_halo_fits<16>(ci, batch);
  if (g.bs == 32) return dw_halo_fits<32>(ci, batch);
  return g.bs == 64 && wide_asked() && dw_halo_fits<64>(ci, batch);
}

int dw_halo_run_size(int bs) {
  return bs == 64 ? DwHaloTile<64>::kG : bs == 32 ? DwHaloTile<32>::kG : DwHaloTile<16>::kG;
}

void conv_gradient_halo(const BlockGradient& g, const ConvIndex& ci, int64_t batch, int device, cudaStream_t stream) {
  if (g.col_runs == 0) return;
  dispatch_types(g.in_dtype, g.out_dtype, [&](auto tin, auto tout) {
    using T = typename decltype(tin)::type;
    using TO = typename decltype(tout)::type;
    auto launch = [&](auto bs) {
      constexpr int BS = decltype(bs)::value;
      const ConvTiles ct = conv_tiles(ci, batch, /*dx=*/false, DwHaloTile<BS>::kPositions, TileBoxes::halo);
      launch_dw_halo<T, TO, BS>(g, ct, device, stream);
    };
    if (g.bs == 64) return launch(std::integral_constant<int, 64>{});
    if (g.bs == 32) return launch(std::integral_constant<int, 32>{});
    return launch(std::integral_constant<int, 16>{});
  });
}

}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
