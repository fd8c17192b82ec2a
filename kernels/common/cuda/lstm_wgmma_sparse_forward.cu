// The block-sparse LSTM recurrence's forward on wgmma (issue 16; compute capability 9.0, sm_90a):
// the production forward's inputs and outputs (lstm_persistent.h, recurrence_forward) for W_h in
// blocks of 32 under nn::LSTM's gate layout (lstm_gate_layout: the recurrent mask repeated for
// the gates i, f, o, u, so the four gate columns of a group of units hold the same block rows, in
// the same order), batch B ≤ 64, bf16 or f16, one group per SM.
//
// One thread block per group c of 32 units (grid H / 32, a cooperative launch). Its list holds the
// n_c block rows r_i of block column c (gate i's; the other gates' columns c + g·H/32 list the same
// rows). The block keeps, for each entry, the four gates' W blocks [32 K, 32 units] side by side as
// one MN-major B tile [32 K, 128] (each block as stored, row-major: TMA boxes [32, 32], 64-byte
// swizzle; along N the blocks are 2 KB apart), and per step copies one operand box [64, 32] of h_t
// per entry (the columns r_i·32 …, from h0 and then y[t − 1]: a 3-D map over y [T, B, H], rows B …
// 63 the box's zero fill) through the ring, each multiplied by the entry's tile:
//   P [64, 128] = Σ_i h_t[:, r_i·32 …] · W_tile(i)      (m64n128k16 wgmmas, f32 accumulators)
//   pre_g = (P[:, 32g + n] + gx[t][:, g·H + 32c + n]) + (bias[g·H + 32c + n] (+ forget_bias, g = f))
//   i, f, o = σ(…), u = tanh(…), c = f·c + i·u, h = o·tanh(c)
// and stores y[t], the f32 gates and cells, hT and cT as the dense forward does (lstm_wgmma_
// forward.cu). Thread (warp w, lane 4·wq + q) owns rows 16w + wq (+ 8) and, in each gate, the units
// 8o + 2q (+ 1) for o = 0 … 3 of the group (accumulator column 8j + 2q + e, j = 4g + o). The split
// grid barrier orders the steps. Each sum has a fixed order: the same inputs give the same bits.
//
// Where the groups pass the SMs (H 8192: 256 groups on 132 SMs), a block takes two neighbouring
// groups 2b, 2b + 1, one per consumer warpgroup (kGroups = 2, grid H / 64): their W tiles side by
// side in shared memory (sized by the busiest pair), the ring split in two (four stages each: one
// warpgroup's boxes must not share a stage's phases with the other's, whose waits would run a phase
// ahead), the two groups' boxes issued in turn, and one arrival per block once both warpgroups
// have stored.
//
// Where even the pairs' W tiles pass shared memory (H 8192 at 1/16: 33.5 MB of W_h against 30 MB
// on 132 SMs), the streamed form (kStreamed, two groups a block; TESSERA_LSTM_SPARSE_STREAMED, on by
// default: 40.0 -> 18.0 µs a step there on the H100) keeps each group's first `w_tiles`
// entries' tiles resident and copies the rest with their operand boxes: a stage holds the box
// [64, 32] of h and, for an entry past w_tiles, the entry's tile [32, 128] beside it (12 KB).
// Its ring: kWgmmaRing stages (four a warpgroup). Deeper rings (6 or 8 stages a warpgroup, fewer
// tiles resident for them) were slower at H 8192 1/16 (H100, 2026-12-07: 18.3 -> 20.3 and 21.2 µs
// a step): the forward pays more for the tiles it then streams than it saves in waits. So was the
// backward's order (streamed_entries: the streamed entries first, and the step's first stages'
// tiles copied before the grid barrier), 18.4 -> 18.9 µs a step in the same call where it took the
// backward from 27.8 to 26.6: the forward keeps its streamed entries last. A shallower ring (6,
// three stages a warpgroup, three more tiles resident a block), timed once each group had its own
// producer, lost too (H100, 2026-12-07, both rounds of one call: 17.2-17.3 -> 18.1-18.4 µs a
// step, the graph step 16.37-16.43 -> 16.59-16.68 ms).
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "core/cuda/check.cuh"
#include "core/cuda/runtime.h"
#include "kernels/common/cuda/bsmm_sm90_common.cuh"
#include "kernels/common/cuda/layout_tables.h"
#include "kernels/common/cuda/lstm_gate_math.cuh"
#include "kernels/common/cuda/lstm_persistent.h"
#include "kernels/common/cuda/lstm_wgmma_ring.cuh"

namespace tessera {
namespace cuda {
namespace sm90 {
namespace {

constexpr int kSpBs = 32;                     // the block size it takes
constexpr int kSpCols = 4 * kSpBs;            // the product's columns: 4 gates × 32 units
constexpr int kSpABox = 64 * kSpBs * 2;       // an operand box [64 rows, 32 K]
constexpr int kSpWBlock = kSpBs * kSpBs * 2;  // one W block [32, 32]
constexpr int kSpWTile = 4 * kSpWBlock;       // an entry's tile: the four gates' blocks
constexpr int kSpMaxEntries = 32;             // block rows of a group at most (the tables in shared memory)
constexpr int kSpStreamedStage = kSpABox + kSpWTile;  // the streamed form's stage: the box, then a tile

// W's tiles (`tiles`: a block's block rows over its groups, or the resident ones), the ring of
// `stage`-byte stages, the barriers and the alignment, the entry tables and the bias.
size_t sparse_smem_bytes(int tiles, int groups, int stage = kSpABox) {
  const size_t tables = static_cast<size_t>(groups) * (kSpMaxEntries * 5 + kSpCols) * 4;
  return static_cast<size_t>(tiles) * kSpWTile + static_cast<size_t>(kWgmmaRing) * stage + 2048 + tables;
}

std::atomic<uint64_t> g_sparse_launches{0};
std::atomic<uint64_t> g_sparse_streamed_launches{0};

struct SparseArgs {
  int steps, batch, hidden, q;  // q = H / 32: block columns of a gate
  float forget_bias;
  const int32_t* col_ptr;  // the gate layout's tables (layout_tables.h)
  const int32_t* col_blocks;
  const int32_t* block_row;
  const void* gx;    // [T, B, 4H]
  const void* bias;  // [4H] or null
  const void* c0;    // [B, H]
  void* y;           // [T, B, H]
  void* h_last;
  void* c_last;
  float* gates;  // [T, B, 4H]
  float* cells;  // [T, B, H]
  unsigned* counter;
};

// The streamed form's threads: two consumer warpgroups and a producer warp for each (one producer
// issuing both groups' copies in turn waits at one group's busy stage while the other's are free:
// H 8192 1/16 on the H100, 2026-12-07, forward 18.3 -> 16.7 µs a step; the same in the other forms,
// one producer a work unit, made the resident forward at H 4096 1/16 6.8 -> 7.4 µs and the
// backwards 1-3% slower, so they keep one).
constexpr int kStreamedThreads = 2 * 160;

// w_tiles: the tiles held, the busiest block's entries; with kStreamed, each group's first w_tiles.
template <class T, int kGroups, bool kStreamed = false>
__global__ void __launch_bounds__(kStreamed ? kStreamedThreads : sparse_block_threads(kGroups), 1)
    lstm_wgmma_sparse_forward_kernel(const __grid_constant__ CUtensorMap map_h0,
                                     const __grid_constant__ CUtensorMap map_y,
                                     const __grid_constant__ CUtensorMap map_w, const SparseArgs p, int w_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kRing = kWgmmaRing, kStages = kRing / kGroups;  // a warpgroup's share of the ring
  constexpr int kStage = kStreamed ? kSpStreamedStage : kSpABox;
  extern __shared__ uint8_t smem_raw[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = warp / 4;
  // the block's block rows: entries of group kGroups·b first, then group kGroups·b + 1's
  const int first = p.col_ptr[kGroups * blockIdx.x], entries = p.col_ptr[kGroups * (blockIdx.x + 1)] - first;
  const RingSmem m = carve_ring_smem(smem_raw, (kStreamed ? kGroups : 1) * w_tiles * kSpWTile, kStage, kRing);
  uint8_t *w_s = m.w, *ring = m.ring;
  uint64_t *full = m.full, *empty = m.empty, *w_bar = m.w_bar;
  int32_t* rows_s = reinterpret_cast<int32_t*>(w_bar + 1);  // [entries]: r_i
  int32_t* blk_s = rows_s + kGroups * kSpMaxEntries;        // [entries][4]: gate g's block of entry i
  // [kGroups][4 gates][32 units]: the bias (the forget gate's with forget_bias) where two groups
  // share the block (their warps' registers are 168 at most: 3 warps share a scheduler's file)
  float* bias_s = reinterpret_cast<float*>(blk_s + 4 * kGroups * kSpMaxEntries);
  for (int i = threadIdx.x; i < entries; i += blockDim.x) {
    const int b0 = p.col_blocks[first + i];
    rows_s[i] = p.block_row[b0];
#pragma unroll
    for (int g = 0; g < 4; ++g) blk_s[4 * i + g] = p.col_blocks[p.col_ptr[g * p.q] + first - p.col_ptr[0] + i];
  }
  if constexpr (kGroups > 1)
    for (int i = threadIdx.x; i < kGroups * kSpCols; i += blockDim.x) {
      const int gate = i / kSpBs % 4, unit = (kGroups * blockIdx.x + i / kSpCols) * kSpBs + i % kSpBs;
      const float b = p.bias ? to_acc(static_cast<const T*>(p.bias)[gate * p.hidden + unit]) : 0.f;
      bias_s[i] = gate == 1 ? p.forget_bias + b : b;
    }
  init_ring_barriers<1, kRing>(full, empty, w_bar);  // (its block barrier also publishes the tables)
  if (warp >= 4 * kGroups) {  // the producer(s): the W tiles once, then per step one box of h_t per entry
    if (lane == 0) {
      // group g's entries [lead[g], lead[g] + count[g]) of the block's, its boxes through its share
      // of the ring (stages g·kStages …): the streamed form's producer warp 4·kGroups + mg copies
      // group mg's, the others' one producer the i-th box of each group in turn
      const int mg = warp - 4 * kGroups;
      int lead[kGroups], count[kGroups];
      const int most = unit_lists(p.col_ptr, first, lead, count);
      // an entry's four gate blocks side by side at `tile`, completing on `bar`
      auto copy_tile = [&](uint8_t* tile, uint64_t* bar, int e) {
#pragma unroll
        for (int g = 0; g < 4; ++g) tma_load_2d(tile + g * kSpWBlock, &map_w, bar, 0, blk_s[4 * e + g] * kSpBs);
      };
      if (mg == 0) {  // the resident tiles, every group's
        if constexpr (kStreamed) {  // group g's first w_tiles entries at tiles g·w_tiles …
          int held = 0;
#pragma unroll
          for (int g = 0; g < kGroups; ++g) held += min(count[g], w_tiles);
          mbar_arrive_expect_tx(w_bar, held * kSpWTile);
#pragma unroll
          for (int g = 0; g < kGroups; ++g)
            for (int i = 0; i < min(count[g], w_tiles); ++i)
              copy_tile(w_s + (g * w_tiles + i) * kSpWTile, w_bar, lead[g] + i);
        } else {
          mbar_arrive_expect_tx(w_bar, entries * kSpWTile);
          for (int i = 0; i < entries; ++i) copy_tile(w_s + i * kSpWTile, w_bar, i);
        }
      }
      if constexpr (kStreamed) {  // group mg's boxes and streamed tiles
        const int at = p.col_ptr[kGroups * blockIdx.x + mg], mine = p.col_ptr[kGroups * blockIdx.x + mg + 1] - at;
        const int my_lead = at - first;  // group mg's entries in the block's tables
        for (int t = 0; t < p.steps; ++t) {
          if (t > 0) {
            wait_count(p.counter, static_cast<unsigned>(t) * gridDim.x);
            fence_proxy_async_global();  // the other blocks' stores of y[t − 1] (generic) before these TMA reads
          }
          for (int i = 0; i < mine; ++i) {
            const int u = t * mine + i, s = mg * kStages + u % kStages, r = rows_s[my_lead + i];
            const bool streamed = i >= w_tiles;
            uint8_t* stage = ring + s * kStage;
            mbar_wait(&empty[s], ((u / kStages) & 1) ^ 1);
            mbar_arrive_expect_tx(&full[s], streamed ? kSpStreamedStage : kSpABox);
            if (t == 0) {
              tma_load_2d(stage, &map_h0, &full[s], r * kSpBs, 0);
            } else {
              tma_load_3d(stage, &map_y, &full[s], r * kSpBs, 0, t - 1);
            }
            if (streamed) copy_tile(stage + kSpABox, &full[s], my_lead + i);
          }
        }
      } else {  // one producer: the i-th box of each group in turn
        for (int t = 0; t < p.steps; ++t) {
          if (t > 0) {
            wait_count(p.counter, static_cast<unsigned>(t) * gridDim.x);
            fence_proxy_async_global();  // the other blocks' stores of y[t − 1] (generic) before these TMA reads
          }
          for (int i = 0; i < most; ++i)
#pragma unroll
            for (int g = 0; g < kGroups; ++g) {
              if (i >= count[g]) continue;
              const int u = t * count[g] + i, s = g * kStages + u % kStages, r = rows_s[lead[g] + i];
              uint8_t* stage = ring + s * kStage;
              mbar_wait(&empty[s], ((u / kStages) & 1) ^ 1);
              mbar_arrive_expect_tx(&full[s], kSpABox);
              if (t == 0) {
                tma_load_2d(stage, &map_h0, &full[s], r * kSpBs, 0);
              } else {
                tma_load_3d(stage, &map_y, &full[s], r * kSpBs, 0, t - 1);
              }
            }
        }
      }
    }
    return;
  }

  // the consumers: warpgroup wg takes group c = kGroups·b + wg, its entries [lead, lead + mine) of
  // the block's; rows r[hh] = 16·(warp mod 4) + lane / 4 + 8·hh; in each gate the units
  // 32c + 8o + 2q (+ 1)
  const int c = kGroups * blockIdx.x + wg, lead = p.col_ptr[c] - first, mine = p.col_ptr[c + 1] - p.col_ptr[c];
  const int B = p.batch, H = p.hidden, q = lane % 4, u0 = c * kSpBs + 2 * q;
  const int64_t G4 = 4 * static_cast<int64_t>(H);
  int rows[2];
  bool live[2];
  consumer_rows(warp % 4, lane, B, rows, live);
  float2 bias_r[4][4];  // gate g of units 8o + 2q (+ 1); the forget gate's with forget_bias
  if constexpr (kGroups == 1)
#pragma unroll
    for (int g = 0; g < 4; ++g)
#pragma unroll
      for (int o = 0; o < 4; ++o) {
        const float2 b = p.bias ? load_pair(static_cast<const T*>(p.bias) + g * H + u0 + 8 * o) : make_float2(0.f, 0.f);
        bias_r[g][o] = g == 1 ? make_float2(p.forget_bias + b.x, p.forget_bias + b.y) : b;
      }
  auto bias = [&](int g, int o) {  // from registers, or with two groups a block from shared memory
    if constexpr (kGroups == 1) return bias_r[g][o];
    return *reinterpret_cast<const float2*>(bias_s + wg * kSpCols + g * kSpBs + 8 * o + 2 * q);
  };
  float cst[2][4][2];  // the cell of (row hh, unit 8o + 2q + e)
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
#pragma unroll
    for (int o = 0; o < 4; ++o) {
      const float2 v = live[hh]
                           ? load_pair(static_cast<const T*>(p.c0) + static_cast<int64_t>(rows[hh]) * H + u0 + 8 * o)
                           : make_float2(0.f, 0.f);
      cst[hh][o][0] = v.x;
      cst[hh][o][1] = v.y;
    }
  mbar_wait(w_bar, 0);
  const uint8_t* w_mine = w_s + (kStreamed ? wg * w_tiles : lead) * kSpWTile;
  uint8_t* my_ring = ring + wg * kStages * kStage;
  uint64_t *my_full = full + wg * kStages, *my_empty = empty + wg * kStages;
  for (int t = 0, n = 0; t < p.steps; ++t, n += mine) {
    // B of entry k, slice kk: the tile's K rows 16kk …, MN-major, the gates' blocks 2 KB apart; the
    // tile resident, or (streamed, past w_tiles) beside the entry's box in its stage
    auto b_desc = [&](int k, int kk) {
      const uint8_t* tile = w_mine + k * kSpWTile;
      if (kStreamed && k >= w_tiles) tile = my_ring + ((n + k) % kStages) * kStage + kSpABox;
      return make_desc(tile + kk * 16 * 64, kSpWBlock, 8 * 64, 64);
    };
    keep_pace_if_idle(entries == 0, p.counter, t);  // a block with no block rows
    // the step's input term, read (packed) while the operand arrives: gx[hh][g][o] holds gate g's
    // units 8o + 2q (+ 1) of row rows[hh]
    Pair<T> gx[2][4][4];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const T* row = static_cast<const T*>(p.gx) + (static_cast<int64_t>(t) * B + rows[hh]) * G4 + u0;
#pragma unroll
      for (int g = 0; g < 4; ++g)
#pragma unroll
        for (int o = 0; o < 4; ++o) gx[hh][g][o] = live[hh] ? load_pair_raw(row + g * H + 8 * o) : Pair<T>{};
    }
    float acc[kSpCols / 2];
    ring_product_with<T, kSpCols, 2, 1, kStages, kStage>(acc, my_ring, my_full, my_empty, n, mine, lane, b_desc,
                                                         release_stage<1>);
    // acc[4j + 2hh + e]: row rows[hh], column 8j + 2q + e = gate j / 4, unit 8(j mod 4) + 2q + e
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      if (!live[hh]) continue;
      float* gt = p.gates + (static_cast<int64_t>(t) * B + rows[hh]) * G4 + u0;
#pragma unroll
      for (int o = 0; o < 4; ++o) {
        float gate[4][2], h[2];
#pragma unroll
        for (int g = 0; g < 4; ++g) {
          const float2 x = unpack_pair<T>(gx[hh][g][o]);
          const int j = 4 * g + o;
          const float2 b = bias(g, o);
          const float pre0 = (acc[4 * j + 2 * hh] + x.x) + b.x;
          const float pre1 = (acc[4 * j + 2 * hh + 1] + x.y) + b.y;
          gate[g][0] = g == 3 ? tanh_fast(pre0) : sigmoid_fast(pre0);
          gate[g][1] = g == 3 ? tanh_fast(pre1) : sigmoid_fast(pre1);
        }
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          cst[hh][o][e] = gate[1][e] * cst[hh][o][e] + gate[0][e] * gate[3][e];
          h[e] = gate[2][e] * tanh_fast(cst[hh][o][e]);
        }
        const int64_t hb = static_cast<int64_t>(rows[hh]) * H + u0 + 8 * o, th = static_cast<int64_t>(t) * B * H + hb;
        store_pair(static_cast<T*>(p.y) + th, h[0], h[1]);
        *reinterpret_cast<float2*>(p.cells + th) = make_float2(cst[hh][o][0], cst[hh][o][1]);
#pragma unroll
        for (int g = 0; g < 4; ++g)
          *reinterpret_cast<float2*>(gt + g * H + 8 * o) = make_float2(gate[g][0], gate[g][1]);
        if (t == p.steps - 1) {
          store_pair(static_cast<T*>(p.h_last) + hb, h[0], h[1]);
          store_pair(static_cast<T*>(p.c_last) + hb, cst[hh][o][0], cst[hh][o][1]);
        }
      }
    }
    arrive_grid<kGroups>(p.counter);  // the step's outputs stored: the block's arrival
  }
#else
  __trap();  // compiled for another architecture: the host never launches this
#endif
}

// How the forward runs a layout on a device: the grid (one group a block or two), and with the
// streamed form the tiles of a group kept resident (w_tiles; else -1).
struct ForwardPlan {
  SparseGrid grid;
  int w_tiles = -1;
};

template <class T>
ForwardPlan forward_plan(int device, int64_t hidden, const SparseLayoutFacts& f) {
  const SparseStreamed streamed = sparse_streamed_choice();
  const int groups = static_cast<int>(hidden / kSpBs);
  ForwardPlan plan;
  if (!streamed.first) {
    plan.grid = sparse_grid(device, groups, lstm_wgmma_sparse_forward_kernel<T, 1>,
                            sparse_smem_bytes(f.max_col_blocks, 1), lstm_wgmma_sparse_forward_kernel<T, 2>,
                            sparse_smem_bytes(f.max_pair_col_blocks, 2), "a group's W tiles pass shared memory",
                            "more groups of 32 units than resident blocks, one or two a block");
    if (plan.grid.per_block > 0 || streamed.cap < 0) return plan;
  }
  // two groups a block, each its first w_tiles tiles resident (as many as fit, within the cap)
  const int w_tiles = streamed_resident_units(device, sparse_smem_bytes(0, 2, kSpStreamedStage), kSpWTile,
                                              streamed.cap, f.max_col_blocks);
  const size_t smem = sparse_smem_bytes(2 * w_tiles, 2, kSpStreamedStage);
  if (groups % 2 == 0 && all_resident(lstm_wgmma_sparse_forward_kernel<T, 2, true>, device, kStreamedThreads,
                                      smem, groups / 2))
    return {{2, smem, ""}, w_tiles};
  if (plan.grid.per_block == 0) plan.grid = {0, smem, "more pairs of groups than resident blocks, even streamed"};
  return plan;
}

template <class T>
void launch_sparse(const Tensor& gx, const Tensor& h0, const Tensor& c0, const Tensor& wh, const Tensor& bias,
                   const LayoutPtr& layout, double forget_bias, const Tensor& y, const Tensor& hT, const Tensor& cT,
                   const Tensor& gates, const Tensor& cells) {
  const int device = gx.device().index;
  const int64_t steps = gx.size(0), batch = gx.size(1), hidden = h0.size(1);
  const DType dt = gx.dtype();
  const cudaStream_t stream = current_stream(y);
  const SparseLayoutFacts facts = sparse_layout_facts(layout);
  const ForwardPlan plan = forward_plan<T>(device, hidden, facts);
  const SparseGrid& grid = plan.grid;
  TS_CHECK(grid.per_block > 0, ValueError, "lstm_recurrence (wgmma, block-sparse): " << grid.why);
  const bool streamed = plan.w_tiles >= 0;
  const int w_tiles = streamed ? plan.w_tiles : grid.per_block == 2 ? facts.max_pair_col_blocks : facts.max_col_blocks;
  const size_t smem = grid.smem;
  const BlockTables tables = device_tables(layout, device);
  const CUtensorMap map_h0 = tensor_map(h0.data_ptr(), dt, static_cast<uint64_t>(batch), hidden, 64, kSpBs);
  const uint64_t y_dims[3] = {static_cast<uint64_t>(hidden), static_cast<uint64_t>(batch),
                              static_cast<uint64_t>(steps)};
  const uint32_t y_box[3] = {kSpBs, 64, 1};
  const CUtensorMap map_y = encode_map(y.data_ptr(), dt, 3, y_dims, y_box);
  const CUtensorMap map_w =
      tensor_map(wh.data_ptr(), dt, static_cast<uint64_t>(layout->nnz()) * kSpBs, kSpBs, kSpBs, kSpBs);
  unsigned* counter = static_cast<unsigned*>(allocate(256, device));
  TS_CUDA_CHECK(cudaMemsetAsync(counter, 0, 256, stream));
  SparseArgs a = {};
  a.steps = static_cast<int>(steps);
  a.batch = static_cast<int>(batch);
  a.hidden = static_cast<int>(hidden);
  a.q = static_cast<int>(hidden / kSpBs);
  a.forget_bias = static_cast<float>(forget_bias);
  a.col_ptr = tables.col_ptr;
  a.col_blocks = tables.col_blocks;
  a.block_row = tables.block_row;
  a.gx = gx.data_ptr();
  a.bias = bias.defined() ? bias.data_ptr() : nullptr;
  a.c0 = c0.data_ptr();
  a.y = y.data_ptr();
  a.h_last = hT.data_ptr();
  a.c_last = cT.data_ptr();
  a.gates = static_cast<float*>(gates.data_ptr());
  a.cells = static_cast<float*>(cells.data_ptr());
  a.counter = counter;
  const auto kernel = streamed                ? &lstm_wgmma_sparse_forward_kernel<T, 2, true>
                      : grid.per_block == 2 ? &lstm_wgmma_sparse_forward_kernel<T, 2>
                                            : &lstm_wgmma_sparse_forward_kernel<T, 1>;
  TS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaLaunchAttribute attrs[2];
  const int blocks = static_cast<int>(hidden / kSpBs) / grid.per_block;
  const cudaLaunchConfig_t cfg =
      wgmma_launch_config(blocks, streamed ? kStreamedThreads : sparse_block_threads(grid.per_block), smem, stream, 1,
                          true, attrs);
  const cudaError_t launched = cudaLaunchKernelEx(&cfg, kernel, map_h0, map_y, map_w, a, w_tiles);
  deallocate(counter, 256, device);  // stream-ordered: freed after the kernel
  TS_CUDA_CHECK(launched);
  TS_CUDA_LAUNCH_CHECK("lstm_recurrence (wgmma, block-sparse)");
  g_sparse_launches.fetch_add(1, std::memory_order_relaxed);
  if (grid.per_block == 2) count_sparse_paired_launch();
  if (streamed) g_sparse_streamed_launches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace
}  // namespace sm90

std::string wgmma_sparse_forward_unfit(int device, DType dtype, int64_t batch, int64_t hidden,
                                       const LayoutPtr& layout) {
  if (!layout) return "block-sparse layers only";
  if (layout->block_size() != sm90::kSpBs) return "blocks of 32 only";
  if (layout->in_features() != hidden || layout->out_features() != 4 * hidden) return "W_h must be [H, 4H]";
  if (dtype != DType::bf16 && dtype != DType::f16) return "bf16 or f16 only";
  if (batch < 1 || batch > 64) return "batch 1 to 64 only";
  if (!sm90::device_ok(device)) return "compute capability 9.0 only";
  const sm90::SparseLayoutFacts facts = sm90::sparse_layout_facts(layout);
  if (!facts.gate_layout) return "not nn::LSTM's gate layout";
  if (facts.max_col_blocks > sm90::kSpMaxEntries) return "a group's block rows pass 32";
  const sm90::ForwardPlan plan = dtype == DType::bf16 ? sm90::forward_plan<__nv_bfloat16>(device, hidden, facts)
                                                      : sm90::forward_plan<__half>(device, hidden, facts);
  if (plan.grid.per_block == 0) return plan.grid.why;
  return "";
}

void wgmma_sparse_forward(const Tensor& gx, const Tensor& h0, const Tensor& c0, const Tensor& wh, const Tensor& bias,
                          const LayoutPtr& layout, double forget_bias, const Tensor& y, const Tensor& hT,
                          const Tensor& cT, const Tensor& gates, const Tensor& cells) {
  if (gx.dtype() == DType::bf16) {
    sm90::launch_sparse<__nv_bfloat16>(gx, h0, c0, wh, bias, layout, forget_bias, y, hT, cT, gates, cells);
  } else {
    sm90::launch_sparse<__half>(gx, h0, c0, wh, bias, layout, forget_bias, y, hT, cT, gates, cells);
  }
}

uint64_t wgmma_sparse_forward_launch_count() { return sm90::g_sparse_launches.load(std::memory_order_relaxed); }
uint64_t wgmma_sparse_streamed_forward_launch_count() {
  return sm90::g_sparse_streamed_launches.load(std::memory_order_relaxed);
}

}  // namespace cuda
}  // namespace tessera
