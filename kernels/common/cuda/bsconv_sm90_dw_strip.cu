// The strip form of the halo dW kernel (bsconv_sm90_dw_halo.cu; the default where it applies since
// 2026-12-08, TESSERA_BSCONV_DW_STRIP=0 or bsconv_gpu --dw-strip off gives the halo dW kernel back): bs 32,
// a 3x3 filter of dilation 1 over two spatial axes (conv_tiles.h's strip boxes, x ∈ {8, 16}).
//
//   dw[k, (dy, dx)] = Σ over the output positions p of x[p + (dy, dx), k's block row]ᵀ · dY[p, k's column]
//
// Why: at bs 32 the halo dW kernel's m64n32k16 reads 2 KB of A (ldmatrix) and 1 KB of B (dY) from
// shared memory, 24 cycles of shared memory against 16 of tensor work, and its stage (a dY box and
// two halo boxes) feeds 64 of them. Here the tap's row offset is taken out of the A fragment:
//
// - A work item is a run of 2 blocks of a column's list with all 9 taps (cuda::conv_dw_runs of 18
//   entries: a column's runs start at its first block, so every run holds whole blocks) and a part
//   of the tiles, 256 output positions each (ConvTiles of TileBoxes::strip_dw: X × Y × 1 × S).
// - Three consumer warpgroups, one per filter column dx, and a producer warp. Warp w multiplies
//   channels 16·(w % 2) .. of block w / 2 of the run (M = 64: the two blocks' 32 channels), into three
//   accumulators, the taps (dy, dx) for dy = 0, 1, 2.
// - A k16 slice of positions is (x < X, row y, the 16 / X samples of a sample group); a strip is
//   four consecutive rows y0 .. y0 + 3 of one group (conv_tiles.h's strip_dw_row). Tap (dy, dx) of
//   slice y reads the halo rows of slice y + dy at column offset dx, so per strip a warp loads six A
//   fragments (halo rows y0 + f, f = 0..5, at dx; transposing ldmatrix) for twelve wgmmas: (slice
//   y0 + mi, tap dy) takes fragment mi + dy. Per m64n32k16 that is 1 KB of A and 1 KB of B (16 cycles
//   of shared memory: the tensor pipe's pace), and a stage (the dY box and the two blocks' halo boxes)
//   feeds 144 of them instead of 64.
//
// B is the dY box MN-major as in the halo dW kernel; a slice's two 8-row halves lie X·Y rows apart
// at X = 8 (two samples), side by side at X = 16: the descriptor's stride. Stores and parts as the
// halo dW kernel: deterministic, each element summed by one thread over the positions in tile order
// and the parts in a fixed order.
#include <algorithm>

#include "core/tensor.h"
#include "kernels/common/cuda/bsmm_sm90.h"
#include "kernels/common/cuda/bsconv_sm90_dw_common.cuh"
#include "kernels/common/cuda/bsmm_sm90_common.cuh"
#include "kernels/common/cuda/mma_sm80.cuh"
#include "kernels/common/ring_cursor.h"

namespace tessera {
namespace cuda {
namespace sm90 {

std::atomic<uint64_t> g_dw_strip_launches{0};

namespace {

struct DwStripTile {
  // three consumer warpgroups (dx = 0, 1, 2), then one producer warp (registers are given out by four
  // warps: 416 threads have 128 a thread, as 512 would)
  static constexpr int kConsumerWarps = 12;
  static constexpr int kThreads = 32 * (kConsumerWarps + 1);
  static constexpr int kBS = 32;
  static constexpr int kPositions = 256;     // output positions per tile
  static constexpr int kStrips = kPositions / 64;
  static constexpr int kRowBytes = 2 * kBS;  // a position's channels of a block
  static constexpr int kDyBytes = kPositions * kRowBytes;
  static constexpr int kBlocks = 2;          // blocks of a run
  static constexpr int kTaps = 9;
  static constexpr int kItemRing = 4;
  static constexpr int kMaxStages = kDwMaxStages;
};

/// The stage layout: the dY box, then a halo box for each block of the run.
DwHaloSmem dw_strip_smem(const ConvTiles& ct) {
  return dw_halo_layout(ct, DwStripTile::kRowBytes, DwStripTile::kDyBytes, DwStripTile::kBlocks);
}

template <class T, class TO>
__global__ void __launch_bounds__(DwStripTile::kThreads, 1)
    dw_strip_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_dy,
                    BlockGradient p, int parts, int part_steps, float* __restrict__ partial, ConvTiles ct,
                    DwHaloSmem sm) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tile = DwStripTile;
  constexpr int BS = Tile::kBS, kRowBytes = Tile::kRowBytes, kRing = Tile::kItemRing, kTaps = Tile::kTaps;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align1024(smem_raw);
  auto dy_box = [&](int s) { return smem + s * sm.stage_bytes; };
  auto halo = [&](int s, int b) { return smem + s * sm.stage_bytes + Tile::kDyBytes + b * sm.halo_bytes; };
  const int stages = sm.stages;
  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
  const DwSync sync = dw_sync<kRing>(smem, sm.stage_bytes, stages, Tile::kMaxStages, Tile::kConsumerWarps);
  const int steps = ct.total_tiles;
  const int items = p.col_runs * parts;

  if (wg == 3) {
    // Producer: the last warp (lane b < blocks copies block b's halo box).
    produce_dw_halo<kRing, BS, Tile::kDyBytes>(map_x, map_dy, p, ct, items, part_steps, stages, sync, dy_box,
                                               halo);
    return;
  }

  const int dx = wg, warp = (threadIdx.x / 32) % 4, g = lane / 4, t4 = lane % 4;
  const int b = warp / 2;  // the run's block whose channels 16·(warp % 2) .. this warp multiplies
  TO* dw = static_cast<TO*>(p.dw);
  // The lane's position in a k16 slice (ldmatrix x4 trans, conv_tiles.h's halo_at_lane), its halo row at
  // slice (0, 0) and tap (0, dx), and strip st's offsets from slice (0, 0) in halo rows and dY rows (the
  // same for every thread: strip_dw_row's y0 = 4·(st % A) and samples (16 / X)·(st / A), A = Y / 4)
  int lane_pos, lane_chunk;
  halo_at_lane(lane, 16 * (warp % 2), lane_pos, lane_chunk);
  const int X = ct.box[0], Y = ct.box[1], hx = ct.halo[0], hxy = ct.halo[0] * ct.halo[1];
  const int a_lane = ct.halo_row(strip_dw_row(ct, 0, 0, lane_pos)) + dx;
  const int log_a = Y == 16 ? 2 : Y == 8 ? 1 : 0, per_group = 16 / X;
  auto a_strip = [&](int st) { return 4 * hx * (st & ((1 << log_a) - 1)) + hxy * per_group * (st >> log_a); };
  auto b_strip = [&](int st) { return 4 * X * (st & ((1 << log_a) - 1)) + X * Y * per_group * (st >> log_a); };
  // B: slice (st, mi) from dY row b_strip(st) + X·mi, its second 8-row half strip_dw_half rows on
  const uint32_t sbo = static_cast<uint32_t>(strip_dw_half(ct) * kRowBytes);
  const uint64_t desc0 = make_desc(dy_box(0), Tile::kDyBytes, sbo, kRowBytes);
  auto b_desc = [&](int s, int st, int mi) {  // (the start address field: bytes / 16, no carry out of it)
    return desc0 + static_cast<uint64_t>((s * sm.stage_bytes + (b_strip(st) + X * mi) * kRowBytes) >> 4);
  };
  auto a_at = [&](const uint8_t* box, int row) { return box + swizzled_offset(row, lane_chunk, kRowBytes); };

  RingCursor stage;
  for (int n = 0;; ++n) {
    const int4 w = receive_item<kRing>(n, sync.item_full, sync.item_empty, sync.ring, lane);
    if (w.y == 0) break;
    const int q0 = w.x, blocks = w.y / kTaps, part = w.z;
    const int first = part * part_steps, last = min(steps, first + part_steps);
    const int hslot = b < blocks ? b : 0;  // a run of one block: warps 2-3 compute rows never stored
    float acc[3][BS / 2];
#pragma unroll
    for (int dy = 0; dy < 3; ++dy)
#pragma unroll
      for (int i = 0; i < BS / 2; ++i) acc[dy][i] = 0.f;
    for (int step = first; step < last; ++step, stage.next(stages)) {
      const int s = stage.slot;
      mbar_wait(&sync.full[s], stage.phase);
      const uint8_t* box = halo(s, hslot);
      // Per strip: the six fragments, then the twelve products that read them; one buffer (two spilled at
      // the 128 registers a thread has), so a strip's loads wait for the products of the strip before:
      // the other two consumer warps of the scheduler fill the gap.
      uint32_t fr[6][4];
#pragma unroll 1  // unrolled, ptxas kept all 16 slices' B descriptors in registers and spilled
      for (int st = 0; st < Tile::kStrips; ++st) {
        const int row0 = a_lane + a_strip(st);
        if (st > 0) {
          wgmma_wait<0>();
#pragma unroll
          for (int dy = 0; dy < 3; ++dy) fence_operands(acc[dy]);
        }
#pragma unroll
        for (int k = 0; k < 6; ++k) sm80::ldmatrix_x4_trans(fr[k], a_at(box, row0 + k * hx));
        wgmma_fence();
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          const uint64_t db = b_desc(s, st, mi);
#pragma unroll
          for (int dy = 0; dy < 3; ++dy) WgmmaRS<T, BS>::template run<1>(acc[dy], fr[mi + dy], db);
        }
        wgmma_commit();
      }
      wgmma_wait<0>();
#pragma unroll
      for (int dy = 0; dy < 3; ++dy) fence_operands(acc[dy]);
      __syncwarp();  // the whole warp's reads of the stage come before lane 0 releases it
      if (lane == 0) mbar_arrive(&sync.empty[s]);
    }
    // Row i = 16·warp + g + 8h of accumulator dy is channel i % 32 of block b (list position q0 / 9 + b)
    // at tap 3·dy + dx: dw block (k·9 + tap).
    if (b >= blocks) continue;  // the same for every lane of the warp
    const int64_t kb = static_cast<int64_t>(p.col_blocks[q0 / kTaps + b]) * kTaps;
#pragma unroll
    for (int dy = 0; dy < 3; ++dy)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        store_dw_row<TO, BS>(dw, partial, parts, part, p.nnz, kb + 3 * dy + dx, 16 * (warp % 2) + g + 8 * h, acc[dy],
                             h, t4);
  }
#else
  __trap();
#endif
}

template <class T, class TO>
void launch_dw_strip(const BlockGradient& g, const ConvTiles& ct, int device, cudaStream_t stream) {
  using Tile = DwStripTile;
  const DwHaloSmem sm = dw_strip_smem(ct);
  const CUtensorMap map_x = conv_map(g.x, g.in_dtype, g.C, ct.a_ext, Tile::kBS, ct.halo);
  const CUtensorMap map_dy = conv_map(g.dy, g.in_dtype, g.K, ct.ext, Tile::kBS, ct.box);
  constexpr auto kernel = &dw_strip_kernel<T, TO>;
  const int persistent = persistent_grid<kernel>(sm.total, Tile::kThreads);
  const DwParts d = dw_parts(g, Tile::kBS, ct.total_tiles, Tile::kPositions, persistent, device);
  const int grid = static_cast<int>(std::min<int64_t>(static_cast<int64_t>(g.col_runs) * d.parts, persistent));
  kernel<<<grid, Tile::kThreads, sm.total, stream>>>(map_x, map_dy, g, d.parts, d.part_steps, d.sums(), ct, sm);
  TS_CUDA_LAUNCH_CHECK("bsconv_dw (strip)");
  sum_dw_parts<TO>(g, Tile::kBS, d, persistent, stream);
  g_launches.fetch_add(1, std::memory_order_relaxed);
  g_conv_launches.fetch_add(1, std::memory_order_relaxed);
  g_halo_launches.fetch_add(1, std::memory_order_relaxed);
  g_dw_strip_launches.fetch_add(1, std::memory_order_relaxed);
}

// The switch (TESSERA_BSCONV_DW_STRIP=0 off; unset or 1 on): on by default since its first timing (H100,
// 2026-12-08, N 64 × 56 × 56 bs 32 density 0.25: 0.152-0.154 ms against the halo dW kernel's 0.205-0.224;
// 32 × 28 × 28: 0.089-0.090 against 0.158-0.164).
bool dw_strip_asked() { return env_switch("TESSERA_BSCONV_DW_STRIP", "0", "1", true); }

ConvTiles dw_strip_tiles(const ConvIndex& ci, int64_t batch) {
  return conv_tiles(ci, batch, /*dx=*/false, DwStripTile::kPositions, TileBoxes::strip_dw);
}

}  // namespace

bool dw_strip_takes(const BlockGradient& g, const ConvIndex& ci, int64_t batch) {
  if (g.bs != DwStripTile::kBS || ci.taps != DwStripTile::kTaps || !dw_strip_asked()) return false;
  const ConvTiles ct = dw_strip_tiles(ci, batch);
  if (!strip_dw_tiles_apply(ct.ext, DwStripTile::kPositions) || !ct.halo_fits()) return false;
  for (int32_t t = 0; t < DwStripTile::kTaps; ++t) {
    int32_t dy = 0, dx = 0;
    if (!strip_tap(ct, t, dy, dx) || t != 3 * dy + dx) return false;
  }
  return dw_strip_smem(ct).fits();
}

int dw_strip_run_size() { return DwStripTile::kBlocks * DwStripTile::kTaps; }

uint64_t dw_strip_launch_count() { return g_dw_strip_launches.load(std::memory_order_relaxed); }

void conv_gradient_strip(const BlockGradient& g, const ConvIndex& ci, int64_t batch, int device,
                         cudaStream_t stream) {
  if (g.col_runs == 0) return;
  dispatch_types(g.in_dtype, g.out_dtype, [&](auto tin, auto tout) {
    using T = typename decltype(tin)::type;
    using TO = typename decltype(tout)::type;
    launch_dw_strip<T, TO>(g, dw_strip_tiles(ci, batch), device, stream);
  });
}

}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
