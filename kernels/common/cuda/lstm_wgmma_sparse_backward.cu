// The block-sparse LSTM recurrence's backward through time on wgmma (issue 16; compute capability
// 9.0, sm_90a): the production backward's inputs and outputs (lstm_persistent.h,
// recurrence_backward) for W_h [H, 4H] in blocks of 32, batch B ≤ 64, bf16 or f16, one block row
// per SM.
//
// One thread block per block row r of W_h (32 units of h; grid H / 32, a cooperative launch). Its
// list holds the row's n_r blocks (indices row_ptr[r] …, block columns col_b across all four gates'
// columns); it keeps each block resident as stored ([32 units, 32 columns] row-major: the K-major B
// operand of dh = dpre·W_hᵀ, TMA boxes [32, 32], 64-byte swizzle), and per phase copies one box
// [64, 32] of dpre_{t+1} per block (its columns col_b·32 …; a 3-D map over dpre [T, B, 4H], rows
// B … 63 zero fill) through the ring:
//   P [64, 32] = Σ_b dpre_{t+1}[:, col_b·32 …] · W_bᵀ     (m64n32k16 wgmmas, f32 accumulators)
// then the production backward's gate-gradient arithmetic for the row's 32 units (as
// lstm_wgmma_backward.cu: dh = (P + dy_t) (+ dh_T at ph 0), dc, dpre_t, dc carried, dc0, and
// dh0 = P in the last phase). Thread (warp w, lane 4·wq + q) owns rows 16w + wq (+ 8) and the units
// 32r + 8o + 2q (+ 1), o = 0 … 3 (accumulator column 8o + 2q + e). The split grid barrier orders
// the phases. Each sum has a fixed order: the same inputs give the same bits.
//
// Where the block rows pass the SMs (H 8192: 256 on 132 SMs), a block takes two neighbouring rows
// 2b, 2b + 1, one per consumer warpgroup (kRows = 2, grid H / 64), as the forward pairs its groups:
// their blocks side by side in shared memory, the ring split in two (each warpgroup its stages),
// the rows' boxes issued in turn, one arrival per block.
//
// Gate boxes (kGateBoxes; TESSERA_LSTM_SPARSE_GATE_BOXES, on by default, with one row a block or
// two): under the gate layout a block row's list is m mask entries in
// each gate, gate-major (list position g·m + i: column g·q + c_i), so one TMA box {32 units, 64
// rows, 4 gates} over dpre viewed as [T, 4 gates, B, H] (strides: a gate H, a row 4H) brings entry
// i's four operand boxes at once into a 16 KB stage (four compact [64, 32] boxes), and the product
// takes the four gates' blocks from it: a quarter of the copies and barrier waits, and more bytes in
// flight (kGateRing stages; with two rows a block kGatePairRing, two a row).
//
// Where even the pairs' blocks pass shared memory (H 8192 at 1/16), the streamed form (kStreamed,
// two rows a block; TESSERA_LSTM_SPARSE_STREAMED, on by default) keeps each row's last `w_tiles`
// copy units resident and copies each other unit's W blocks beside its operand boxes; those come
// first in a phase (streamed_entries), and the producer takes the phase's first stages and issues
// their W copies before it waits at the grid barrier (they need no dpre). One box a
// copy: a stage holds the box [64, 32] of dpre and its block [32, 32] (6 KB; H 8192 at 1/16 on the
// H100: 53.5 -> 32.9 µs a step against the production kernel). With gate boxes (the default where
// the layout allows; TESSERA_LSTM_SPARSE_GATE_BOXES=0 takes the form above): a mask entry's four
// boxes and its four blocks (24 KB stages; 33.5 -> 32.3 µs a step, one call on the H100), through
// kGateStreamRing stages (three a row; two, the other pair forms' kGatePairRing, kept one more unit
// resident but measured 31.8 µs a step against 28.4-28.7 with three, and four 29.0-29.1: H100,
// 2026-12-07, both rounds of one call). Four, timed again once the W copies started before the grid
// barrier, lost again (another call the same day, both rounds: 26.4-27.1 -> 27.8-27.9 µs a step, the
// graph step 16.37-16.43 -> 16.57-16.62 ms).
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "core/cuda/check.cuh"
#include "core/cuda/runtime.h"
#include "kernels/common/cuda/bsmm_sm90_common.cuh"
#include "kernels/common/cuda/layout_tables.h"
#include "kernels/common/cuda/lstm_gate_math.cuh"
#include "kernels/common/cuda/lstm_persistent.h"
#include "kernels/common/cuda/lstm_wgmma_dense_cell.cuh"
#include "kernels/common/cuda/lstm_wgmma_dense_launch.cuh"
#include "kernels/common/cuda/lstm_wgmma_ring.cuh"

namespace tessera {
namespace cuda {
namespace sm90 {
namespace {

constexpr int kSbBs = 32;                     // the block size it takes
constexpr int kSbABox = 64 * kSbBs * 2;       // an operand box [64 rows, 32 K]
constexpr int kSbWBlock = kSbBs * kSbBs * 2;  // one W block [32, 32]
constexpr int kSbMaxEntries = 128;            // blocks of a row at most (the table in shared memory)
constexpr int kGateRing = 5;                  // the gate boxes' stages (16 KB each), one row a block
constexpr int kGatePairRing = 4;              // the same with two rows a block: two stages a row
constexpr int kGateStreamRing = 6;            // the same in the streamed form: three stages a row

// W's blocks (`entries`: a block's, over its rows), the ring, the barriers and alignment, the table.
size_t sparse_bwd_smem_bytes(int entries, int rows, int ring = kWgmmaRing, int stage = kSbABox) {
  return static_cast<size_t>(entries) * kSbWBlock + static_cast<size_t>(ring) * stage + 2048 + rows * kSbMaxEntries * 4;
}

constexpr int kSbStreamedStage = kSbABox + kSbWBlock;  // the streamed form's stage: the box, then a block
constexpr int kSbStreamedGateStage = 4 * (kSbABox + kSbWBlock);  // with gate boxes: four boxes, four blocks

std::atomic<uint64_t> g_sparse_bwd_launches{0};
std::atomic<uint64_t> g_sparse_bwd_streamed_launches{0};
std::atomic<uint64_t> g_sparse_bwd_gate_box_launches{0};

// The dense backward's arguments (lstm_wgmma_dense_cell.cuh) and the layout's tables (layout_tables.h).
struct SparseBackwardArgs : BackwardArgs {
  const int32_t* row_ptr;
  const int32_t* block_col;
};

// One phase's product with gate boxes: acc [64, 32] = Σ over the row's m entries i and the gates g of
// stage (n + i)'s box g [64, 32] (K-major, 64-byte rows; stages kStageBytes apart) times the W block
// of (i, g) at w_block(i, g, stage) ([32 units, 32 columns]: resident at list position g·m + i, or
// streamed beside the boxes) transposed.
template <class T, int kStages, int kStageBytes, class WBlock>
__device__ __forceinline__ void gate_box_product(float (&acc)[kSbBs / 2], uint8_t* ring, uint64_t* full,
                                                 uint64_t* empty, int n, int m, int lane, WBlock w_block) {
#pragma unroll
  for (int e = 0; e < kSbBs / 2; ++e) acc[e] = 0.f;
  if (m == 0) return;
  for (int i = 0; i < m; ++i) {
    const int s = (n + i) % kStages;
    const uint8_t* stage = ring + s * kStageBytes;
    mbar_wait(&full[s], ((n + i) / kStages) & 1);
    wgmma_fence();
#pragma unroll
    for (int g = 0; g < 4; ++g)
#pragma unroll
      for (int kk = 0; kk < 2; ++kk)
        Wgmma<T, kSbBs>::template run<0, 0>(acc, make_desc(stage + g * kSbABox + kk * 32, 16, 8 * 64, 64),
                                            make_desc(w_block(i, g, stage) + kk * 32, 16, 8 * 64, 64), true);
    wgmma_commit();
    if (i > 0) {  // entry i − 1's products are done: its stage goes back to the producer
      wgmma_wait<1>();
      fence_operands(acc);
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[(n + i - 1) % kStages]);
    }
  }
  wgmma_wait<0>();
  fence_operands(acc);
  __syncwarp();
  if (lane == 0) mbar_arrive(&empty[(n + m - 1) % kStages]);
}

// kRing: the ring's stages (kWgmmaRing, split between the rows); kGateBoxes: an entry's four gates a
// stage (kRing = kGateRing with one row a block, kGatePairRing with two, kGateStreamRing streamed);
// kStreamed: the streamed form (two rows; one box a copy, or with kGateBoxes a mask entry's four).
// w_tiles: the blocks held, the busiest block's; with kStreamed, each row's last w_tiles.
template <class T, int kRows, int kRing = kWgmmaRing, bool kGateBoxes = false, bool kStreamed = false>
__global__ void __launch_bounds__(sparse_block_threads(kRows), 1)
    lstm_wgmma_sparse_backward_kernel(const __grid_constant__ CUtensorMap map_dpre,
                                      const __grid_constant__ CUtensorMap map_w, const SparseBackwardArgs p,
                                      int w_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kStages = kRing / kRows;  // a warpgroup's share of the ring
  constexpr int kBox = kGateBoxes ? (kStreamed ? kSbStreamedGateStage : 4 * kSbABox)
                                  : (kStreamed ? kSbStreamedStage : kSbABox);  // a stage
  constexpr int kPer = kGateBoxes ? 4 : 1;  // W blocks a copy unit (a mask entry's four gates, or one)
  extern __shared__ uint8_t smem_raw[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = warp / 4;
  // the block's blocks: row kRows·b's first, then row kRows·b + 1's
  const int first = p.row_ptr[kRows * blockIdx.x], entries = p.row_ptr[kRows * (blockIdx.x + 1)] - first;
  const RingSmem m = carve_ring_smem(smem_raw, (kStreamed ? kRows * kPer : 1) * w_tiles * kSbWBlock, kBox, kRing);
  uint8_t *w_s = m.w, *ring = m.ring;
  uint64_t *full = m.full, *empty = m.empty, *w_bar = m.w_bar;
  int32_t* cols_s = reinterpret_cast<int32_t*>(w_bar + 1);  // [entries]: block column of entry i
  for (int i = threadIdx.x; i < entries; i += blockDim.x) cols_s[i] = p.block_col[first + i];
  init_ring_barriers<1, kRing>(full, empty, w_bar);  // (its block barrier also publishes the table)
  const int steps = p.steps;
  if (warp == 4 * kRows) {  // the producer: the row's blocks once, then per phase ph ≥ 1 the boxes of dpre_{T − ph}
    if (lane == 0) {
      // row g's boxes (with gate boxes one a mask entry) through its share of the ring (stages
      // g·kStages …), the i-th box of each row in turn
      int lead[kRows], count[kRows];
      const int most = unit_lists<kRows, kPer>(p.row_ptr, first, lead, count);
      // the kPer blocks of row g's unit i (list positions lead[g] + gate·count[g] + i) at `dst`, 2 KB apart
      auto copy_unit = [&](uint8_t* dst, uint64_t* bar, int g, int i) {
#pragma unroll
        for (int gate = 0; gate < kPer; ++gate)
          tma_load_2d(dst + gate * kSbWBlock, &map_w, bar, 0, (first + lead[g] + gate * count[g] + i) * kSbBs);
      };
      // row g's units i < streamed[g] are streamed, the others resident (streamed_entries)
      int streamed[kRows];
#pragma unroll
      for (int g = 0; g < kRows; ++g) streamed[g] = kStreamed ? streamed_entries(count[g], w_tiles) : 0;
      if constexpr (kStreamed) {  // row g's last w_tiles units at units g·w_tiles …
        int held = 0;
#pragma unroll
        for (int g = 0; g < kRows; ++g) held += count[g] - streamed[g];
        mbar_arrive_expect_tx(w_bar, held * kPer * kSbWBlock);
#pragma unroll
        for (int g = 0; g < kRows; ++g)
          for (int i = streamed[g]; i < count[g]; ++i)
            copy_unit(w_s + (g * w_tiles + i - streamed[g]) * kPer * kSbWBlock, w_bar, g, i);
      } else {
        mbar_arrive_expect_tx(w_bar, entries * kSbWBlock);
        for (int i = 0; i < entries; ++i) tma_load_2d(w_s + i * kSbWBlock, &map_w, w_bar, 0, (first + i) * kSbBs);
      }
      constexpr int kBoxes = kPer * kSbABox;  // the operand boxes of a stage
      // unit i of row g in phase ph: its stage taken (once the consumers gave it back) and, streamed,
      // its W blocks copied; then its boxes of dpre_{T − ph}
      auto stage_of = [&](int ph, int g, int i) { return g * kStages + ((ph - 1) * count[g] + i) % kStages; };
      auto take_stage = [&](int ph, int g, int i) {
        const int u = (ph - 1) * count[g] + i, s = stage_of(ph, g, i);
        mbar_wait(&empty[s], ((u / kStages) & 1) ^ 1);
        mbar_arrive_expect_tx(&full[s], i < streamed[g] ? kBox : kBoxes);
        if (i < streamed[g]) copy_unit(ring + s * kBox + kBoxes, &full[s], g, i);
      };
      // the streamed forms take the phase's first stages (their W copies need no dpre) before the
      // grid barrier, so that those copies run while the grid finishes the phase before
      const int early = kStreamed ? min(most, kStages) : 0;
      for (int ph = 1; ph <= steps; ++ph) {
        for (int i = 0; i < early; ++i)
#pragma unroll
          for (int g = 0; g < kRows; ++g)
            if (i < count[g]) take_stage(ph, g, i);
        wait_count(p.counter, static_cast<unsigned>(ph) * gridDim.x);  // every block's dpre_{T − ph}
        fence_proxy_async_global();                                    // those generic stores before these TMA reads
        for (int i = 0; i < most; ++i)
#pragma unroll
          for (int g = 0; g < kRows; ++g) {
            if (i >= count[g]) continue;
            if (i >= early) take_stage(ph, g, i);
            const int s = stage_of(ph, g, i);
            const int col = cols_s[lead[g] + i] * kSbBs;  // with gate boxes: gate 0's column c_i
            if constexpr (kGateBoxes)  // the four gates' columns g'·q + c_i, at g'·H + 32·c_i of dpre
              tma_load_4d(ring + s * kBox, &map_dpre, &full[s], col, 0, 0, steps - ph);
            else
              tma_load_3d(ring + s * kBox, &map_dpre, &full[s], col, 0, steps - ph);
          }
      }
    }
    return;
  }

  // the consumers: warpgroup wg takes block row r = kRows·b + wg, its entries [lead, lead + mine) of
  // the block's; rows r[hh] = 16·(warp mod 4) + lane / 4 + 8·hh; the units 32r + 8o + 2q (+ 1)
  const int r = kRows * blockIdx.x + wg, lead = p.row_ptr[r] - first, mine = p.row_ptr[r + 1] - p.row_ptr[r];
  const int B = p.batch, H = p.hidden, q = lane % 4, u0 = r * kSbBs + 2 * q;
  const int64_t G4 = 4 * static_cast<int64_t>(H);
  int rows[2];
  bool live[2];
  consumer_rows(warp % 4, lane, B, rows, live);
  float dcc[2][4][2];  // the carried dc of (row hh, unit 8o + 2q + e), from dc_T
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
#pragma unroll
    for (int o = 0; o < 4; ++o) {
      const float2 d =
          live[hh] ? load_pair(static_cast<const T*>(p.dc_last) + static_cast<int64_t>(rows[hh]) * H + u0 + 8 * o)
                   : make_float2(0.f, 0.f);
      dcc[hh][o][0] = d.x;
      dcc[hh][o][1] = d.y;
    }
  mbar_wait(w_bar, 0);
  const uint8_t* w_mine = w_s + (kStreamed ? wg * w_tiles * kPer : lead) * kSbWBlock;
  uint8_t* my_ring = ring + wg * kStages * kBox;
  uint64_t *my_full = full + wg * kStages, *my_empty = empty + wg * kStages;
  for (int ph = 0, n = 0; ph <= steps; ++ph) {
    const int t = steps - 1 - ph;
    const bool final_phase = ph == steps;
    keep_pace_if_idle(entries == 0, p.counter, ph);  // a block with no blocks
    // the step's saved gates and cells, c_{t−1} and dy_t, read while the operand arrives (none depends
    // on it; read after the product, each (row, o)'s reads would wait for the stores before them).
    // With two rows a block (168 registers at most: 3 warps share a scheduler's file) c_{t−1} is
    // read after the product.
    auto cprev_of = [&](int hh, int o, bool read) {
      const int64_t hb = static_cast<int64_t>(rows[hh]) * H + u0 + 8 * o, bt = static_cast<int64_t>(t) * B * H + hb;
      return !read  ? make_float2(0.f, 0.f)
             : t > 0 ? *reinterpret_cast<const float2*>(p.cells + bt - static_cast<int64_t>(B) * H)
                     : load_pair(static_cast<const T*>(p.c0) + hb);
    };
    float2 gate_in[2][4][4], cell_in[2][4], cprev_in[kRows == 1 ? 2 : 1][4];
    Pair<T> dy_in[2][4];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const bool read = live[hh] && !final_phase;
#pragma unroll
      for (int o = 0; o < 4; ++o) {
        const int64_t hb = static_cast<int64_t>(rows[hh]) * H + u0 + 8 * o, bt = static_cast<int64_t>(t) * B * H + hb;
        const float* gt = p.gates + (static_cast<int64_t>(t) * B + rows[hh]) * G4 + u0 + 8 * o;
#pragma unroll
        for (int g = 0; g < 4; ++g)
          gate_in[hh][o][g] = read ? *reinterpret_cast<const float2*>(gt + g * H) : make_float2(0.f, 0.f);
        cell_in[hh][o] = read ? *reinterpret_cast<const float2*>(p.cells + bt) : make_float2(0.f, 0.f);
        if constexpr (kRows == 1) cprev_in[hh][o] = cprev_of(hh, o, read);
        dy_in[hh][o] = read ? load_pair_raw(static_cast<const T*>(p.dy) + bt) : Pair<T>{};
      }
    }
    float acc[kSbBs / 2];
    if (ph > 0 && kGateBoxes) {
      const int m4 = mine / 4, streamed = kStreamed ? streamed_entries(m4, w_tiles) : 0;
      // entry i's block of gate g: resident at list position g·m + i, or (streamed form) the first
      // `streamed` entries' beside their boxes and the others' four blocks resident
      auto w_block = [&](int i, int g, const uint8_t* stage) -> const uint8_t* {
        if constexpr (kStreamed)
          return i < streamed ? stage + 4 * kSbABox + g * kSbWBlock : w_mine + (4 * (i - streamed) + g) * kSbWBlock;
        return w_mine + (g * m4 + i) * kSbWBlock;
      };
      gate_box_product<T, kStages, kBox>(acc, my_ring, my_full, my_empty, n, m4, lane, w_block);
      n += mine / 4;
    } else if (ph > 0) {
      // B of entry k, slice kk: the block's rows (units) as N, its columns K-major; resident, or
      // (streamed form, the first `streamed` entries) beside the entry's box in its stage
      const int streamed = kStreamed ? streamed_entries(mine, w_tiles) : 0;
      auto b_desc = [&](int k, int kk) {
        const uint8_t* blk = w_mine + (k - streamed) * kSbWBlock;
        if (k < streamed) blk = my_ring + ((n + k) % kStages) * kBox + kSbABox;
        return make_desc(blk + kk * 32, 16, 8 * 64, 64);
      };
      ring_product_with<T, kSbBs, 2, 0, kStages, kBox>(acc, my_ring, my_full, my_empty, n, mine, lane, b_desc,
                                                       release_stage<1>);
      n += mine;
    } else {
#pragma unroll
      for (int e = 0; e < kSbBs / 2; ++e) acc[e] = 0.f;
    }
    // acc[4o + 2hh + e]: row rows[hh], unit 32r + 8o + 2q + e
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      if (!live[hh]) continue;
#pragma unroll
      for (int o = 0; o < 4; ++o) {
        const int64_t hb = static_cast<int64_t>(rows[hh]) * H + u0 + 8 * o;  // [B, H] index
        if (final_phase) {
          store_pair(static_cast<T*>(p.dh0) + hb, acc[4 * o + 2 * hh], acc[4 * o + 2 * hh + 1]);
          continue;
        }
        float2 cp;
        if constexpr (kRows == 1) {
          cp = cprev_in[hh][o];
        } else {
          cp = cprev_of(hh, o, true);
        }
        const float2 c = cell_in[hh][o], dyv = unpack_pair<T>(dy_in[hh][o]);
        const float cell[2] = {c.x, c.y}, cprev[2] = {cp.x, cp.y}, dyy[2] = {dyv.x, dyv.y};
        float dp[4][2], dc0v[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float dh = acc[4 * o + 2 * hh + e] + dyy[e];
          if (ph == 0) dh += to_acc(static_cast<const T*>(p.dh_last)[hb + e]);
          const float2* gi = gate_in[hh][o];
          const float g[4] = {e ? gi[0].y : gi[0].x, e ? gi[1].y : gi[1].x, e ? gi[2].y : gi[2].x,
                              e ? gi[3].y : gi[3].x};
          float d[4];
          lstm_step_grads(g, cell[e], cprev[e], dh, dcc[hh][o][e], d);
#pragma unroll
          for (int j = 0; j < 4; ++j) dp[j][e] = d[j];
          dc0v[e] = dcc[hh][o][e];
        }
        T* dpt = static_cast<T*>(p.dpre) + (static_cast<int64_t>(t) * B + rows[hh]) * G4 + u0 + 8 * o;
#pragma unroll
        for (int g = 0; g < 4; ++g) store_pair(dpt + g * H, dp[g][0], dp[g][1]);
        if (t == 0) store_pair(static_cast<T*>(p.dc0) + hb, dc0v[0], dc0v[1]);
      }
    }
    if (final_phase) break;
    arrive_grid<kRows>(p.counter);  // the phase's dpre_t stored: the block's arrival
  }
#else
  __trap();  // compiled for another architecture: the host never launches this
#endif
}

// Under nn::LSTM's gate layout and TESSERA_LSTM_SPARSE_GATE_BOXES (1, the default), with one block
// row a block or two: the gate boxes where their ring fits and all rows stay resident (its shared
// memory then in `grid`).
template <class T>
bool gate_boxes(SparseGrid& grid, int device, int64_t hidden, const SparseLayoutFacts& f) {
  if (!f.gate_layout || !sparse_gate_boxes_wanted()) return false;
  if (grid.per_block == 1) {
    const size_t smem = sparse_bwd_smem_bytes(f.max_row_blocks, 1, 4 * kGateRing);  // (a stage: 4 boxes)
    if (!all_resident(lstm_wgmma_sparse_backward_kernel<T, 1, kGateRing, true>, device, sparse_block_threads(1), smem,
                      hidden / kSbBs))
      return false;
    grid.smem = smem;
    return true;
  }
  if (grid.per_block != 2) return false;
  const size_t smem = sparse_bwd_smem_bytes(f.max_pair_row_blocks, 2, 4 * kGatePairRing);
  if (!all_resident(lstm_wgmma_sparse_backward_kernel<T, 2, kGatePairRing, true>, device, sparse_block_threads(2),
                    smem, hidden / kSbBs / 2))
    return false;
  grid.smem = smem;
  return true;
}

// dpre [T, B, 4H] as [T, 4 gates, B, H] for the gate boxes: dims (H, B, 4, T) innermost first, a
// row 4H elements apart, a gate H, a step B·4H; boxes {32, 64, 4, 1} (64-byte swizzle).
CUtensorMap gate_box_map(const Tensor& dpre, int64_t steps, int64_t batch, int64_t hidden) {
  CUtensorMap map;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(hidden), static_cast<cuuint64_t>(batch), 4,
                              static_cast<cuuint64_t>(steps)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(8 * hidden), static_cast<cuuint64_t>(2 * hidden),
                                 static_cast<cuuint64_t>(8 * hidden * batch)};
  const cuuint32_t box[4] = {kSbBs, 64, 4, 1}, element_strides[4] = {1, 1, 1, 1};
  const CUtensorMapDataType type =
      dpre.dtype() == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult r = encode_tiled()(&map, type, 4, dpre.data_ptr(), dims, strides, box, element_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_64B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TS_CHECK(r == CUDA_SUCCESS, DeviceError, "lstm_recurrence_backward: dpre's gate-box tensor map failed (" << r << ")");
  return map;
}

// How the backward runs a layout on a device: one block row a block, or two (sparse_grid), and with
// the streamed form the copy units of a row kept resident (w_tiles; else -1) and whether it copies
// gate boxes.
struct BackwardPlan {
  SparseGrid grid;
  int w_tiles = -1;
  bool gate_boxes = false;
};

template <class T>
BackwardPlan backward_plan(int device, int64_t hidden, const SparseLayoutFacts& f) {
  const SparseStreamed streamed = sparse_streamed_choice();
  const int rows = static_cast<int>(hidden / kSbBs);
  BackwardPlan plan;
  if (!streamed.first) {
    plan.grid = sparse_grid(device, rows, lstm_wgmma_sparse_backward_kernel<T, 1>,
                            sparse_bwd_smem_bytes(f.max_row_blocks, 1), lstm_wgmma_sparse_backward_kernel<T, 2>,
                            sparse_bwd_smem_bytes(f.max_pair_row_blocks, 2),
                            "a block row's W blocks pass shared memory",
                            "more block rows than resident blocks, one or two a block");
    if (plan.grid.per_block > 0 || streamed.cap < 0) return plan;
  }
  // two rows a block, each its last w_tiles copy units resident (as many as fit, within the cap):
  // with gate boxes (the default) a mask entry's four blocks a unit, else one block
  if (f.gate_layout && sparse_gate_boxes_wanted() && rows % 2 == 0) {
    const size_t fixed = sparse_bwd_smem_bytes(0, 2, kGateStreamRing, kSbStreamedGateStage);
    const int w_tiles = streamed_resident_units(device, fixed, 4 * kSbWBlock, streamed.cap, f.max_row_blocks / 4);
    const size_t smem = sparse_bwd_smem_bytes(2 * 4 * w_tiles, 2, kGateStreamRing, kSbStreamedGateStage);
    if (all_resident(lstm_wgmma_sparse_backward_kernel<T, 2, kGateStreamRing, true, true>, device,
                     sparse_block_threads(2), smem, rows / 2))
      return {{2, smem, ""}, w_tiles, true};
  }
  const int w_tiles = streamed_resident_units(device, sparse_bwd_smem_bytes(0, 2, kWgmmaRing, kSbStreamedStage),
                                              kSbWBlock, streamed.cap, f.max_row_blocks);
  const size_t smem = sparse_bwd_smem_bytes(2 * w_tiles, 2, kWgmmaRing, kSbStreamedStage);
  if (rows % 2 == 0 && all_resident(lstm_wgmma_sparse_backward_kernel<T, 2, kWgmmaRing, false, true>, device,
                                    sparse_block_threads(2), smem, rows / 2))
    return {{2, smem, ""}, w_tiles};
  if (plan.grid.per_block == 0) plan.grid = {0, smem, "more pairs of block rows than resident blocks, even streamed"};
  return plan;
}

template <class T>
void launch_sparse_backward(const Tensor& dy, const Tensor& dhT, const Tensor& dcT, const Tensor& gates,
                            const Tensor& cells, const Tensor& c0, const Tensor& wh, const LayoutPtr& layout,
                            const Tensor& dpre, const Tensor& dh0, const Tensor& dc0) {
  const int device = dy.device().index;
  const int64_t steps = dy.size(0), batch = dy.size(1), hidden = dy.size(2);
  const DType dt = dy.dtype();
  const cudaStream_t stream = current_stream(dpre);
  const SparseLayoutFacts facts = sparse_layout_facts(layout);
  BackwardPlan plan = backward_plan<T>(device, hidden, facts);
  SparseGrid& grid = plan.grid;
  const bool streamed = plan.w_tiles >= 0;
  const bool boxes4 = streamed ? plan.gate_boxes : gate_boxes<T>(grid, device, hidden, facts);
  TS_CHECK(grid.per_block > 0, ValueError, "lstm_recurrence_backward (wgmma, block-sparse): " << grid.why);
  const int w_tiles = streamed              ? plan.w_tiles
                      : grid.per_block == 2 ? facts.max_pair_row_blocks
                                            : facts.max_row_blocks;
  const size_t smem = grid.smem;
  const BlockTables tables = device_tables(layout, device);
  const uint64_t dims[3] = {static_cast<uint64_t>(4 * hidden), static_cast<uint64_t>(batch),
                            static_cast<uint64_t>(steps)};
  const uint32_t box[3] = {kSbBs, 64, 1};
  const CUtensorMap map_dpre =
      boxes4 ? gate_box_map(dpre, steps, batch, hidden) : encode_map(dpre.data_ptr(), dt, 3, dims, box);
  const CUtensorMap map_w =
      tensor_map(wh.data_ptr(), dt, static_cast<uint64_t>(layout->nnz()) * kSbBs, kSbBs, kSbBs, kSbBs);
  SparseBackwardArgs a;
  static_cast<BackwardArgs&>(a) = dense_backward_args(dy, dhT, dcT, gates, cells, c0, dpre, dh0, dc0, stream);
  a.row_ptr = tables.row_ptr;
  a.block_col = tables.block_col;
  const auto kernel = streamed ? (boxes4 ? &lstm_wgmma_sparse_backward_kernel<T, 2, kGateStreamRing, true, true>
                                         : &lstm_wgmma_sparse_backward_kernel<T, 2, kWgmmaRing, false, true>)
                      : grid.per_block == 2 ? (boxes4 ? &lstm_wgmma_sparse_backward_kernel<T, 2, kGatePairRing, true>
                                                      : &lstm_wgmma_sparse_backward_kernel<T, 2>)
                      : boxes4 ? &lstm_wgmma_sparse_backward_kernel<T, 1, kGateRing, true>
                               : &lstm_wgmma_sparse_backward_kernel<T, 1>;
  TS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaLaunchAttribute attrs[2];
  const int blocks = static_cast<int>(hidden / kSbBs) / grid.per_block;
  const cudaLaunchConfig_t cfg =
      wgmma_launch_config(blocks, sparse_block_threads(grid.per_block), smem, stream, 1, true, attrs);
  const cudaError_t launched = cudaLaunchKernelEx(&cfg, kernel, map_dpre, map_w, a, w_tiles);
  deallocate(a.counter, 256, device);  // stream-ordered: freed after the kernel
  TS_CUDA_CHECK(launched);
  TS_CUDA_LAUNCH_CHECK("lstm_recurrence_backward (wgmma, block-sparse)");
  g_sparse_bwd_launches.fetch_add(1, std::memory_order_relaxed);
  if (grid.per_block == 2) count_sparse_paired_launch();
  if (boxes4) g_sparse_bwd_gate_box_launches.fetch_add(1, std::memory_order_relaxed);
  if (streamed) g_sparse_bwd_streamed_launches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace
}  // namespace sm90

std::string wgmma_sparse_backward_unfit(int device, DType dtype, int64_t batch, int64_t hidden,
                                        const LayoutPtr& layout) {
  if (!layout) return "block-sparse layers only";
  if (layout->block_size() != sm90::kSbBs) return "blocks of 32 only";
  if (layout->in_features() != hidden || layout->out_features() != 4 * hidden) return "W_h must be [H, 4H]";
  if (dtype != DType::bf16 && dtype != DType::f16) return "bf16 or f16 only";
  if (batch < 1 || batch > 64) return "batch 1 to 64 only";
  if (!sm90::device_ok(device)) return "compute capability 9.0 only";
  const sm90::SparseLayoutFacts facts = sm90::sparse_layout_facts(layout);
  if (facts.max_row_blocks > sm90::kSbMaxEntries) return "a block row's blocks pass 128";
  const sm90::BackwardPlan plan = dtype == DType::bf16 ? sm90::backward_plan<__nv_bfloat16>(device, hidden, facts)
                                                       : sm90::backward_plan<__half>(device, hidden, facts);
  if (plan.grid.per_block == 0) return plan.grid.why;
  return "";
}

void wgmma_sparse_backward(const Tensor& dy, const Tensor& dhT, const Tensor& dcT, const Tensor& gates,
                           const Tensor& cells, const Tensor& c0, const Tensor& wh, const LayoutPtr& layout,
                           const Tensor& dpre, const Tensor& dh0, const Tensor& dc0) {
  if (dy.dtype() == DType::bf16) {
    sm90::launch_sparse_backward<__nv_bfloat16>(dy, dhT, dcT, gates, cells, c0, wh, layout, dpre, dh0, dc0);
  } else {
    sm90::launch_sparse_backward<__half>(dy, dhT, dcT, gates, cells, c0, wh, layout, dpre, dh0, dc0);
  }
}

uint64_t wgmma_sparse_backward_launch_count() { return sm90::g_sparse_bwd_launches.load(std::memory_order_relaxed); }
uint64_t wgmma_sparse_streamed_backward_launch_count() {
  return sm90::g_sparse_bwd_streamed_launches.load(std::memory_order_relaxed);
}
uint64_t wgmma_sparse_backward_gate_box_launch_count() {
  return sm90::g_sparse_bwd_gate_box_launches.load(std::memory_order_relaxed);
}

}  // namespace cuda
}  // namespace tessera
