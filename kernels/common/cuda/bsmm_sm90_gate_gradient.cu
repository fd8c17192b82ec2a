// The Hopper (sm_90a) kernel of bsmm_dw for nn::LSTM's gate layouts, blocks of 32 (issue 16).
//
// A gate layout (lstm_gate_layout) repeats one mask for the four gates: W [C, 4H] in blocks of
// 32, q = H/32 block columns a gate, and the lists of block columns c, c + q, c + 2q, c + 3q hold
// the same block rows in the same order. So the four gates' blocks of an entry (r, c + g·q) read
// the same X strip, and bsmm_sm90_gradient.cu's runs (one block column each: the dY strip shared,
// every block its own X strip) read each X strip four times. Here a work item is a run of at most
// 8 entries of one gate-0 column c (cuda::gate_dw_runs), for all four gates: 32 blocks. Per
// 64-row step the producer warp copies the four gates' dY strips [64, 32] of the group and the
// run's X strips [64, 32] into one stage (12 strips instead of 4 × 9), and each consumer
// warpgroup computes two products, each two entries' X strips stacked along M against the four
// dY strips stacked along N (both MN-major, the strips 4 KB apart):
//
//   acc [64, 128] += [X_r(2p) | X_r(2p+1)][t0 .. t0+64, :]ᵀ · [dY_c | dY_c+q | dY_c+2q | dY_c+3q][t0 .. t0+64, :]
//   (row i of acc: entry 2p + i / 32, row i % 32 of its blocks; column n: gate n / 32, column n % 32)
//
// Ungated, not transposed. Each element is summed by one thread in row order, so the same inputs give
// the same bits. X [n, C] is much larger than L2 at the wide layers (134 MB at H 4096, 268 MB at
// H 8192; L2 50 MB), and each X strip is read by the ~8-16 runs that list its block row: pacing
// (below) keeps the grid's blocks within a few steps of each other, so those runs read a strip
// while it is still in L2. (Cutting n into 16 chunks, items chunk-major, each chunk's sums into an
// f32 workspace [16, nnz, 32, 32] added up after, was the default at sparse H 8192 until pacing by
// 2 steps beat it on the H100, 2026-12-07, lstm_chunks_call.sh, graph step: H 8192 at 1/16 18.29 /
// 18.26 ms with 1 chunk and the pair against 19.91 / 19.82 with 16 chunks paced by 8; deleted.)
// Pair mode (kPair; bsmm_dw_pair): the entries of two gate layouts a and b of one dY, nn::LSTM's
// input and recurrent masks whose gradients both read dpre [n, 4H], a gate-0 column's a-entries
// then its b-entries in runs of 8 (gate_pair_runs.h): each entry's X strip from X_a, or from X_b
// `shift` rows up (dY row t against X_b row t − shift, the rows before 0 the copy's zero fill),
// its blocks into dW_a or dW_b. One launch reads dpre once where two read it twice (1 GB a read at
// sparse H 8192), and a column's two short lists fill one run (at H 8192 1/64 each mask's runs hold
// about 4 entries of 8); each column's first run also sums its four gates' dY columns (nn::LSTM's
// bias gradient) from the stages it reads. 162-164 registers (168 in pair mode), no spills, no
// serialized wgmma. The default for gate layouts (TESSERA_BSMM_DW_GATE_RUNS=0 runs the general
// kernel instead): on the H100 the sparse H 4096 layer's two weight gradients took 1.65 ms against
// the general kernel's 2.25 (docs/bsmm_kernels.md).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/tensor.h"
#include "kernels/common/cuda/bsmm_sm90.h"
#include "kernels/common/cuda/bsmm_sm90_common.cuh"
#include "kernels/common/gate_pair_runs.h"

namespace tessera {
namespace cuda {
namespace sm90 {
namespace {

constexpr int kGBs = 32;                                // the block size it takes
constexpr int kGKT = 64;                                // rows of n per stage
constexpr int kGRowBytes = 2 * kGBs;                    // one row of a strip
constexpr int kGStrip = kGKT * kGRowBytes;              // a [64, 32] strip of X or dY: 4 KB
constexpr int kGEntries = 8;                            // entries per run: 2 warpgroups × 2 products × 2
constexpr int kGStageBytes = (4 + kGEntries) * kGStrip;  // the four gates' dY strips, then the X strips
constexpr int kGStages = 4;
constexpr int kGItemRing = 4;
constexpr int kGSumThreads = 256;  // the consumers, each summing 16 rows of two dY columns a stage
constexpr int kGSmemBytes =
    kGStages * kGStageBytes + 2 * kGStages * 8 + kGItemRing * (16 + 16) + kGSumThreads * 8 + 1024;

std::atomic<uint64_t> g_gate_launches{0};

// Pacing (TESSERA_BSMM_DW_PACE=N steps, 2 by default, 0 off): each thread block's producer adds a
// tick to a grid-wide count every min(N, kPaceSteps) steps it issues, and before issuing more waits, at most
// kPaceSpin cycles, while the grid's average is more than N steps behind it. The runs that read an
// X strip are ~8 of ~320 at random sparse H 4096 (bsmm_dw_pair), spread over three waves: unpaced,
// the second and third waves' runs drift apart, so most X strips come from DRAM again (ncu: 3.74 GB
// for 0.81 GB of operands, L2 hit rate 36%). A throttle, not a barrier: a block that waits too long
// goes on and waits no more in that launch (it still ticks), so blocks that are not resident at
// once (another kernel holding SMs) can neither deadlock it nor slow it by more than one wait a
// block, and the sums do not depend on it. A block with no items left adds kPaceCredit ticks, so the rest
// are not held back by it. Measured on the H100 (2026-12-07, lstm_step --profile, the layer's weight
// gradients): random sparse H 4096 at 1/16 (the pair) 1.32 / 1.35 ms unpaced, 1.04 at N = 8, 1.18 /
// 1.12 at 16, 1.28 at 32, 1.31 / 1.25 at 64; sparse H 8192 at 1/16 (16 chunks) 5.83 / 5.73, 4.81,
// 5.08 / 5.09, 5.31, 5.68 / 5.55; the balanced H 4096 layer 0.73 / 0.71 unpaced, 0.62 / 0.63 at 16.
// With ticks of N < 8 steps (one tick ahead), H100, 2026-12-07 (lstm_chunks_call.sh, graph step, quads
// and column sums on, two rounds): random H 4096 at 1/16 5.46 / 5.44 ms at N = 2, 5.46 / 5.45 at 4;
// H 8192 at 1/64 8.72 / 8.78 at 2, 8.92 / 8.88 at 4; H 8192 at 1/16 18.15 / 17.93 at 2, 18.51 / 18.65
// at 4 (N = 8 with 16 chunks, the default before: 5.62 / 5.69, 9.65 / 9.69, 19.91 / 19.82).
constexpr int kPaceSteps = 8;  // the longest tick
constexpr int kPaceDefault = 2;
constexpr int kPaceCredit = 1 << 20;
constexpr long long kPaceSpin = 200000;  // about 110 µs at 1.8 GHz

__device__ __forceinline__ int load_volatile(const int* p) { return *reinterpret_cast<const volatile int*>(p); }

/// The descriptor of an MN-major operand of 64-byte rows whose k16 slice starts at `p`, atoms of
/// 32 elements along MN `atom_stride` bytes apart (as bsmm_sm90_gradient.cu's mn_major<64>).
__device__ __forceinline__ uint64_t mn_major64(const uint8_t* p, uint32_t atom_stride) {
  return make_desc(p, atom_stride, 8 * kGRowBytes, kGRowBytes);
}

/// A pair's second layout in the kernel (bsmm_dw_pair; kPair): the entries of gate_pair_runs.h,
/// X_b's map (dY row t reads X_b row t − shift: the rows before 0 are the copy's zero fill), and
/// dw_b, where blocks k ≥ nnz_a go (as its block k − nnz_a); column_sums, not null: each column's
/// first run (kRunOpensColumn) writes Σ_t dY[t, :] of its four gates' 32 columns there.
struct PairArgs {
  const int32_t* entries;
  int shift;
  void* dw_b;
  float* column_sums;
};

template <class T, class TO, bool kPair>
__global__ void __launch_bounds__(kThreads, 1)
    gate_gradient_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_dy,
                         const __grid_constant__ CUtensorMap map_b, BlockGradient p,
                         const int32_t* __restrict__ col_ptr, int q, PairArgs pair, bool dy_evict_first, int items,
                         int pace_ticks, int pace_steps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align1024(smem_raw);
  const DwSync sync = dw_sync<kGStages, kGItemRing>(smem, kGStageBytes);
  uint64_t *full = sync.full, *empty = sync.empty, *item_full = sync.item_full, *item_empty = sync.item_empty;
  int4* ring = sync.ring;
  float2* col_scratch = reinterpret_cast<float2*>(ring + kGItemRing);  // [kGSumThreads]
  auto strip = [&](int s, int i) { return smem + s * kGStageBytes + i * kGStrip; };  // 0-3: dY, 4 + e: X

  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
  const int steps = static_cast<int>((p.n + kGKT - 1) / kGKT);

  if (wg == 0) {
    // Producer: warp 0. Lane 0 takes the items (the longest runs first) and claims each stage;
    // lanes 0-3 copy the four gates' dY strips, lane e < count entry e's X strip.
    if (threadIdx.x >= 32) return;
    if (lane == 0) {
      prefetch_tma_map(&map_x);
      prefetch_tma_map(&map_dy);
    }
    // dY's strips are read by the one or two runs of their column, X's by every run of a column
    // that lists the row (about 8 at H 4096, 1/16): dY's lines go first, so that they do not push
    // X's out of L2 before the other runs read them (ncu, H200, H 4096 at 1/16, without it: L2 hit
    // rate 39%, 1.83 GB from DRAM for 0.67 GB of operands). With it, on the H100: the two dW of that
    // layer 1.72 -> 1.54 ms; H 8192 at 1/64 2.92 -> 2.91
    const uint64_t read_once = dy_evict_first ? l2_evict_first_policy() : 0;
    int it = 0, taken = blockIdx.x;
    int* const pace = p.counter + 2;  // [ticks, blocks done]
    bool waits = true;  // until a wait runs out (the grid not all resident): then it only ticks
    for (int n = 0;; ++n) {
      if (pace_ticks > 0 && lane == 0 && taken >= items) {  // no items left: this block's credit, then done
        atomicAdd(pace, kPaceCredit);
        __threadfence();
        if (atomicAdd(pace + 1, 1) == static_cast<int>(gridDim.x) - 1) {
          pace[0] = 0;
          pace[1] = 0;
        }
      }
      const int4 w = next_run_item<kGItemRing>(p, items, n, taken, lane, item_full, item_empty, ring);
      if (w.y == 0) break;
      // entry `lane`'s X strip: block row `row` of X (kPair: of X_a, or of X_b `shift` rows up)
      int code = 0;
      if (lane < w.y) code = kPair ? pair.entries[5 * (w.x + lane)] : p.col_rows[w.x + lane];
      const bool from_b = kPair && (code & kPairFromB);
      const int count = w.y, row = code & (kPairFromB - 1), up = from_b ? pair.shift : 0;
      const int column = w.w & (kRunOpensColumn - 1);
      const CUtensorMap* map_entry = from_b ? &map_b : &map_x;
      for (int step = 0; step < steps; ++step, ++it) {
        const int s = it % kGStages;
        if (pace_ticks > 0 && lane == 0 && it % pace_steps == 0 && it > 0) {
          // tick; then wait (bounded) while the grid's average is more than pace_ticks behind
          const long long need = static_cast<long long>(gridDim.x) * (it / pace_steps - pace_ticks);
          if (atomicAdd(pace, 1) + 1 < need && waits) {
            const long long t0 = clock64();
            while (load_volatile(pace) < need && clock64() - t0 < kPaceSpin) __nanosleep(64);
            waits = load_volatile(pace) >= need;  // ran out: no more waits in this launch
          }
        }
        if (lane == 0) {
          mbar_wait(&empty[s], ((it / kGStages) & 1) ^ 1);
          mbar_arrive_expect_tx(&full[s], (4 + count) * kGStrip);
        }
        __syncwarp();  // the stage is claimed and its byte count set before the copies land
        if (lane < 4 && dy_evict_first)
          tma_load_2d_hint(strip(s, lane), &map_dy, &full[s], (column + lane * q) * kGBs, step * kGKT, read_once);
        else if (lane < 4)
          tma_load_2d(strip(s, lane), &map_dy, &full[s], (column + lane * q) * kGBs, step * kGKT);
        if (lane < count) tma_load_2d(strip(s, 4 + lane), map_entry, &full[s], row * kGBs, step * kGKT - up);
      }
    }
    return;
  }

  // Consumer warpgroup c computes products 2c and 2c + 1 of each item (entries 2(2c + j), + 1).
  const int c = wg - 1, warp = (threadIdx.x / 32) % 4, g = lane / 4, t = lane % 4;
  int it = 0;
  for (int n = 0;; ++n) {
    const int4 w = receive_item<kGItemRing>(n, item_full, item_empty, ring, lane);
    if (w.y == 0) break;
    const int first = w.x, count = w.y, column = w.w & (kRunOpensColumn - 1);
    // column sums (kPair, the column's first run): consumer u sums gate u / 64's columns
    // 2(u % 16), +1 over the rows 4r + (u / 16) % 4 of each stage (a warp's halves on rows of either
    // parity: other banks), in row order; the four row groups are added in order at the end
    const bool sums = kPair && pair.column_sums != nullptr && (w.w & kRunOpensColumn);
    const int u = threadIdx.x - 128, sum_gate = u / 64, sum_group = (u / 16) % 4, sum_col = 2 * (u % 16);
    float2 col_part = make_float2(0.f, 0.f);
    TO* dw = static_cast<TO*>(p.dw);
    // Both products run even where the run has fewer entries (on stale shared memory, whose rows
    // are never stored): a wgmma under a branch makes ptxas serialize every wgmma of the kernel.
    float acc[2][4 * kGBs / 2];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int i = 0; i < 4 * kGBs / 2; ++i) acc[j][i] = 0.f;
    for (int step = 0; step < steps; ++step, ++it) {
      const int s = it % kGStages;
      mbar_wait(&full[s], (it / kGStages) & 1);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kGKT / 16; ++kk) {
        const uint64_t db = mn_major64(strip(s, 0) + kk * 16 * kGRowBytes, kGStrip);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const uint64_t da = mn_major64(strip(s, 4 + 2 * (2 * c + j)) + kk * 16 * kGRowBytes, kGStrip);
          Wgmma<T, 4 * kGBs>::template run<1, 1>(acc[j], da, db, step > 0 || kk > 0);
        }
      }
      wgmma_commit();
      if (sums) {
        const uint8_t* dy_strip = strip(s, sum_gate);
#pragma unroll
        for (int r = 0; r < kGKT / 4; ++r) {
          const int byte = (4 * r + sum_group) * kGRowBytes + 2 * sum_col;
          const float2 v = load_pair(reinterpret_cast<const T*>(dy_strip + (byte ^ (((byte >> 7) & 3) << 4))));
          col_part.x += v.x;  // (the copy's 64-byte swizzle: 16-byte chunks XOR row / 2 % 4)
          col_part.y += v.y;
        }
      }
      wgmma_wait<1>();
#pragma unroll
      for (int j = 0; j < 2; ++j) fence_operands(acc[j]);
      // The whole warp's reads of the previous stage come before lane 0 releases it.
      __syncwarp();
      if (step > 0 && lane == 0) mbar_arrive(&empty[(it - 1) % kGStages]);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int j = 0; j < 2; ++j) fence_operands(acc[j]);
    __syncwarp();
    if (steps > 0 && lane == 0) mbar_arrive(&empty[(it - 1) % kGStages]);
    if (sums) {  // the same for all 256 consumers
      col_scratch[u] = col_part;
      named_barrier(1, kGSumThreads);
      if (sum_group == 0) {
        float2 total = col_part;
#pragma unroll
        for (int k = 1; k < 4; ++k) {
          total.x += col_scratch[u + 16 * k].x;
          total.y += col_scratch[u + 16 * k].y;
        }
        *reinterpret_cast<float2*>(pair.column_sums + static_cast<int64_t>(column + sum_gate * q) * kGBs + sum_col) =
            total;
      }
      named_barrier(1, kGSumThreads);  // the scratch read before the next run's sums
    }
    // acc[j][4·jj + 2h + e]: row i = 16·warp + g + 8h (entry 2(2c + j) + i / 32, its blocks' row
    // i % 32), column 8·jj + 2t + e (gate jj / 4, its block's column 8(jj % 4) + 2t + e)
    const int offset = kPair ? 0 : first - col_ptr[column];  // the run's place in each gate's list
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = warp * 16 + g + 8 * h, e = 2 * (2 * c + j) + i / kGBs;
        if (e >= count) continue;  // the same for every lane of the warp
#pragma unroll
        for (int gate = 0; gate < 4; ++gate) {
          int64_t k = kPair ? pair.entries[5 * (first + e) + 1 + gate]
                            : p.col_blocks[col_ptr[column + gate * q] + offset + e];
          TO* out = dw;
          if (kPair && k >= p.nnz) {
            out = static_cast<TO*>(pair.dw_b);
            k -= p.nnz;
          }
#pragma unroll
          for (int o = 0; o < kGBs / 8; ++o) {
            const int jj = 4 * gate + o;
            const int64_t at = (k * kGBs + i % kGBs) * kGBs + 8 * o + 2 * t;
            store_pair(out + at, acc[j][4 * jj + 2 * h], acc[j][4 * jj + 2 * h + 1], p.accumulate);
          }
        }
      }
    }
  }
#else
  __trap();
#endif
}

/// One launch of the kernel over g's gate layout (pair null: `col_ptr`) or over a pair (g the
/// first layout: x = X_a, dw = dW_a, nnz its blocks; pair the second, `entries` of
/// gate_pair_runs.h), q block columns a gate, with `runs` runs at `run`. Returns whether the pair's
/// column sums were written (every column has a run to write them).
template <class T, class TO>
bool launch_gates(const BlockGradient& g, const int32_t* run, int runs, const int32_t* col_ptr, int q,
                  const GatePairOperand* pair, const int32_t* entries, bool every_column, cudaStream_t stream) {
  const CUtensorMap map_x = tensor_map(g.x, g.in_dtype, g.n, g.C, kGKT, kGBs);
  const CUtensorMap map_dy = tensor_map(g.dy, g.in_dtype, g.n, g.K, kGKT, kGBs);
  const CUtensorMap map_b = pair ? tensor_map(pair->x, g.in_dtype, pair->rows, pair->C, kGKT, kGBs) : map_x;
  // TESSERA_BSMM_DW_EVICT_FIRST=0 (a lab switch) copies dY with the default L2 policy; 1 (the default) evict-first
  const bool evict_first = env_switch("TESSERA_BSMM_DW_EVICT_FIRST", "0", "1", true);
  // TESSERA_BSMM_DW_PACE=N: at most N steps ahead (ticks of min(N, 8) steps, N rounded down to them;
  // kPaceDefault by default); 0 off
  int pace_ticks = 1, pace_steps = kPaceDefault;
  if (const char* e = std::getenv("TESSERA_BSMM_DW_PACE")) {
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    TS_CHECK(end != e && *end == '\0' && v >= 0 && v <= 4096, ValueError,
             "TESSERA_BSMM_DW_PACE must be a whole number of steps from 0 to 4096, not '" << e << "'");
    pace_steps = std::max(1, std::min(kPaceSteps, static_cast<int>(v)));
    pace_ticks = v == 0 ? 0 : static_cast<int>(v) / pace_steps;
  }
  const int resident = persistent_grid<&gate_gradient_kernel<T, TO, false>>(kGSmemBytes);
  BlockGradient p = g;
  p.col_runs = runs;
  p.col_run = run;
  // the column sums where every column has a run to write them
  float* const column_sums = pair && every_column ? pair->column_sums : nullptr;
  const PairArgs args{entries, pair ? static_cast<int>(pair->shift) : 0, pair ? pair->dw : nullptr, column_sums};
  const int grid = std::min(runs, resident);
  // (persistent_grid<K> before each launch of K: it sets that instantiation's shared-memory size)
  auto launch = [&](auto kernel) {
    kernel<<<grid, kThreads, kGSmemBytes, stream>>>(map_x, map_dy, map_b, p, col_ptr, q, args, evict_first, runs,
                                                    pace_ticks, pace_steps);
  };
  if (pair) {
    persistent_grid<&gate_gradient_kernel<T, TO, true>>(kGSmemBytes);
    launch(&gate_gradient_kernel<T, TO, true>);
  } else {
    launch(&gate_gradient_kernel<T, TO, false>);  // its grid was asked above
  }
  TS_CUDA_LAUNCH_CHECK("bsmm_dw (gate runs)");
  g_launches.fetch_add(1, std::memory_order_relaxed);
  g_gate_launches.fetch_add(1, std::memory_order_relaxed);
  return column_sums != nullptr;
}

}  // namespace

uint64_t gate_launch_count() { return g_gate_launches.load(std::memory_order_relaxed); }

bool gate_gradient_wanted(const BlockGradient& g, int device) {
  if (!env_switch("TESSERA_BSMM_DW_GATE_RUNS", "0", "1", true)) return false;  // 1 (the default) or 0
  return g.bs == kGBs && g.gate == nullptr && !g.transposed && gradient_supported(g, device);
}

void gate_gradient(const BlockGradient& g, const GateRuns& runs, cudaStream_t stream) {
  if (runs.runs == 0) return;
  dispatch_types(g.in_dtype, g.out_dtype, [&](auto tin, auto tout) {
    using T = typename decltype(tin)::type;
    using TO = typename decltype(tout)::type;
    launch_gates<T, TO>(g, runs.run, runs.runs, runs.col_ptr, runs.q, nullptr, nullptr, false, stream);
  });
}

bool gate_pair_gradient_wanted(const BlockGradient& a, const GatePairOperand& b, int device) {
  if (!gate_gradient_wanted(a, device) || a.accumulate || b.rows < 1 || b.shift < 0 || b.shift + b.rows != a.n ||
      b.shift > INT32_MAX || !aligned16(b.x) || !aligned16(b.dw) || b.C % kGBs != 0)
    return false;
  BlockGradient gb = a;  // b's operands as a gradient of their own, for the support rule
  gb.x = b.x;
  gb.dw = b.dw;
  gb.n = b.rows;
  gb.C = b.C;
  gb.nnz = b.nnz;
  return gradient_supported(gb, device);
}

bool gate_pair_gradient(const BlockGradient& a, const GatePairOperand& b, const GatePairTables& runs,
                        cudaStream_t stream) {
  if (runs.runs == 0) return false;
  bool sums = false;
  dispatch_types(a.in_dtype, a.out_dtype, [&](auto tin, auto tout) {
    using T = typename decltype(tin)::type;
    using TO = typename decltype(tout)::type;
    sums = launch_gates<T, TO>(a, runs.run, runs.runs, nullptr, runs.q, &b, runs.entries, runs.every_column, stream);
  });
  return sums;
}

}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
