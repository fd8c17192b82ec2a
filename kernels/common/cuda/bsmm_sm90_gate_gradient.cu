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
// the same bits. Where X is much larger than L2 (gate_chunks: 16 chunks at sparse H 8192) the
// rows n are cut into chunks and the items go chunk-major (all runs of chunk 0, then chunk 1, ...),
// so that the X strips of the chunk the grid is on, which ~8-16 runs read each, can stay in L2
// (X [n, C] is 134 MB at H 4096, 268 MB at H 8192; L2 50 MB); each chunk's sums go to an f32
// workspace [N, nnz, 32, 32] and sum_parts_kernel adds the chunks in order. (Two chunks, N split
// as the general kernel's parts, measured slower at H 4096: X's halves are still larger than L2.)
// 166 registers, no spills, no serialized wgmma. The
// default for gate layouts (TESSERA_BSMM_DW_GATE_RUNS=0 runs the general kernel instead): on the
// H100 the sparse H 4096 layer's two weight gradients took 1.65 ms against the general kernel's
// 2.25 (docs/bsmm_kernels.md).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/tensor.h"
#include "kernels/common/cuda/bsmm_sm90.h"
#include "kernels/common/cuda/bsmm_sm90_common.cuh"
#include "kernels/common/work_waves.h"

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
constexpr int kGSmemBytes = kGStages * kGStageBytes + 2 * kGStages * 8 + kGItemRing * (16 + 16) + 1024;

std::atomic<uint64_t> g_gate_launches{0};

/// The descriptor of an MN-major operand of 64-byte rows whose k16 slice starts at `p`, atoms of
/// 32 elements along MN `atom_stride` bytes apart (as bsmm_sm90_gradient.cu's mn_major<64>).
__device__ __forceinline__ uint64_t mn_major64(const uint8_t* p, uint32_t atom_stride) {
  return make_desc(p, atom_stride, 8 * kGRowBytes, kGRowBytes);
}

template <class T, class TO>
__global__ void __launch_bounds__(kThreads, 1)
    gate_gradient_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_dy,
                         BlockGradient p, const int32_t* __restrict__ col_ptr, int q, bool dy_evict_first, int items,
                         int chunk_steps, int64_t chunk_elems) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align1024(smem_raw);
  const DwSync sync = dw_sync<kGStages, kGItemRing>(smem, kGStageBytes);
  uint64_t *full = sync.full, *empty = sync.empty, *item_full = sync.item_full, *item_empty = sync.item_empty;
  int4* ring = sync.ring;
  auto strip = [&](int s, int i) { return smem + s * kGStageBytes + i * kGStrip; };  // 0-3: dY, 4 + e: X

  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
  // an item's chunk w.z: steps [w.z·chunk_steps, min(steps, (w.z + 1)·chunk_steps)), its sums at
  // dw + w.z·chunk_elems (one chunk: all steps, into dw itself)
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
    for (int n = 0;; ++n) {
      const int4 w = next_run_item<kGItemRing>(p, items, n, taken, lane, item_full, item_empty, ring);
      if (w.y == 0) break;
      const int count = w.y, row = lane < count ? p.col_rows[w.x + lane] : 0;
      const int s0 = w.z * chunk_steps, s1 = min(steps, s0 + chunk_steps);
      for (int step = s0; step < s1; ++step, ++it) {
        const int s = it % kGStages;
        if (lane == 0) {
          mbar_wait(&empty[s], ((it / kGStages) & 1) ^ 1);
          mbar_arrive_expect_tx(&full[s], (4 + count) * kGStrip);
        }
        __syncwarp();  // the stage is claimed and its byte count set before the copies land
        if (lane < 4 && dy_evict_first)
          tma_load_2d_hint(strip(s, lane), &map_dy, &full[s], (w.w + lane * q) * kGBs, step * kGKT, read_once);
        else if (lane < 4)
          tma_load_2d(strip(s, lane), &map_dy, &full[s], (w.w + lane * q) * kGBs, step * kGKT);
        if (lane < count) tma_load_2d(strip(s, 4 + lane), &map_x, &full[s], row * kGBs, step * kGKT);
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
    const int first = w.x, count = w.y, column = w.w;
    const int s0 = w.z * chunk_steps, s1 = min(steps, s0 + chunk_steps);
    TO* dw = static_cast<TO*>(p.dw) + w.z * chunk_elems;
    // Both products run even where the run has fewer entries (on stale shared memory, whose rows
    // are never stored): a wgmma under a branch makes ptxas serialize every wgmma of the kernel.
    float acc[2][4 * kGBs / 2];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int i = 0; i < 4 * kGBs / 2; ++i) acc[j][i] = 0.f;
    for (int step = s0; step < s1; ++step, ++it) {
      const int s = it % kGStages;
      mbar_wait(&full[s], (it / kGStages) & 1);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kGKT / 16; ++kk) {
        const uint64_t db = mn_major64(strip(s, 0) + kk * 16 * kGRowBytes, kGStrip);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const uint64_t da = mn_major64(strip(s, 4 + 2 * (2 * c + j)) + kk * 16 * kGRowBytes, kGStrip);
          Wgmma<T, 4 * kGBs>::template run<1, 1>(acc[j], da, db, step > s0 || kk > 0);
        }
      }
      wgmma_commit();
      wgmma_wait<1>();
#pragma unroll
      for (int j = 0; j < 2; ++j) fence_operands(acc[j]);
      // The whole warp's reads of the previous stage come before lane 0 releases it.
      __syncwarp();
      if (step > s0 && lane == 0) mbar_arrive(&empty[(it - 1) % kGStages]);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int j = 0; j < 2; ++j) fence_operands(acc[j]);
    __syncwarp();
    if (s1 > s0 && lane == 0) mbar_arrive(&empty[(it - 1) % kGStages]);
    // acc[j][4·jj + 2h + e]: row i = 16·warp + g + 8h (entry 2(2c + j) + i / 32, its blocks' row
    // i % 32), column 8·jj + 2t + e (gate jj / 4, its block's column 8(jj % 4) + 2t + e)
    const int offset = first - col_ptr[column];  // the run's place in each gate's list
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = warp * 16 + g + 8 * h, e = 2 * (2 * c + j) + i / kGBs;
        if (e >= count) continue;  // the same for every lane of the warp
#pragma unroll
        for (int gate = 0; gate < 4; ++gate) {
          const int64_t k = p.col_blocks[col_ptr[column + gate * q] + offset + e];
#pragma unroll
          for (int o = 0; o < kGBs / 8; ++o) {
            const int jj = 4 * gate + o;
            const int64_t at = (k * kGBs + i % kGBs) * kGBs + 8 * o + 2 * t;
            store_pair(dw + at, acc[j][4 * jj + 2 * h], acc[j][4 * jj + 2 * h + 1], p.accumulate);
          }
        }
      }
    }
  }
#else
  __trap();
#endif
}

// The chunks the rows n are cut into: 16 where X [n, C] is at least four times the L2 cache and
// the chunks' f32 sums [16, nnz, 32, 32] take no more memory than dY [n, K], else 1. Measured on
// the H100 (one call, 2026-12-07; the layer's three dW, graph step): sparse H 8192 at 1/16 (X 268
// MB, L2 50 MB) 6.46 ms with 1 chunk, 6.81 with 4, 5.88 with 8, 5.55 with 16 (step 22.85 ->
// 21.49 ms); sparse H 4096 at 1/16 (X 134 MB) 1.51 with 1, 1.63 with 16, 1.98 with 32.
// TESSERA_BSMM_DW_CHUNKS=N (the lab's switch) forces 1 to 64, at most one a stage of rows;
// TESSERA_BSMM_DW_CHUNKS=waves (a lab choice, not yet timed) takes, where the L2 rule gives 1,
// the 1 to 4 chunks whose waves of `runs · chunks` items on `grid` thread blocks end soonest
// (pieces_for_waves: 3 for the random sparse H 4096 layer's 173 runs on 132, whose second wave is
// mostly idle with 1), within the same memory bound; anything else a ValueError.
constexpr int kWideChunks = 16, kWaveChunks = 4;

int gate_chunks(const BlockGradient& g, int steps, int device, int runs, int grid) {
  const char* e = std::getenv("TESSERA_BSMM_DW_CHUNKS");
  const bool waves = e && std::strcmp(e, "waves") == 0;
  if (e && !waves) {
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    TS_CHECK(end != e && *end == '\0' && v >= 1 && v <= 64, ValueError,
             "TESSERA_BSMM_DW_CHUNKS must be a whole number from 1 to 64 or 'waves', not '" << e << "'");
    return std::max(1, std::min(static_cast<int>(v), steps));
  }
  int l2 = 0;
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  const int64_t x_bytes = g.n * g.C * 2, dy_bytes = g.n * g.K * 2;  // bf16 / f16 operands
  auto sums_fit = [&](int chunks) { return int64_t{chunks} * g.nnz * kGBs * kGBs * 4 <= dy_bytes; };
  if (l2 > 0 && x_bytes >= 4 * int64_t{l2} && sums_fit(kWideChunks)) return std::min(kWideChunks, steps);
  if (!waves) return 1;
  const int chunks = std::min(pieces_for_waves(runs, grid, kWaveChunks), steps);
  return sums_fit(chunks) ? chunks : 1;
}

template <class T, class TO>
void launch_gates(const BlockGradient& g, const GateRuns& runs, int device, cudaStream_t stream) {
  const CUtensorMap map_x = tensor_map(g.x, g.in_dtype, g.n, g.C, kGKT, kGBs);
  const CUtensorMap map_dy = tensor_map(g.dy, g.in_dtype, g.n, g.K, kGKT, kGBs);
  // TESSERA_BSMM_DW_EVICT_FIRST=0 (a lab switch) copies dY with the default L2 policy; 1 (the default) evict-first
  const bool evict_first = env_switch("TESSERA_BSMM_DW_EVICT_FIRST", "0", "1", true);
  const int steps = static_cast<int>((g.n + kGKT - 1) / kGKT);
  const int resident = persistent_grid<&gate_gradient_kernel<T, float>>(kGSmemBytes);  // either kernel's: same smem
  const int wanted = gate_chunks(g, steps, device, runs.runs, resident);
  const int chunk_steps = (steps + wanted - 1) / wanted;
  const int chunks = (steps + chunk_steps - 1) / chunk_steps;  // every chunk has rows
  const int64_t elems = g.nnz * kGBs * kGBs;
  TS_CHECK(static_cast<int64_t>(runs.runs) * chunks < INT32_MAX, ShapeError,
           "bsmm_dw (gate runs): too many work items");
  const int items = runs.runs * chunks;
  BlockGradient p = g;
  p.col_runs = runs.runs;
  p.col_run = runs.run;
  Tensor partial;  // chunks > 1: [chunks, nnz, 32, 32] f32, freed in stream order after the kernels below
  if (chunks == 1) {
    constexpr auto kernel = &gate_gradient_kernel<T, TO>;
    const int grid = std::min(items, persistent_grid<kernel>(kGSmemBytes));
    kernel<<<grid, kThreads, kGSmemBytes, stream>>>(map_x, map_dy, p, runs.col_ptr, runs.q, evict_first, items,
                                                    chunk_steps, 0);
    TS_CUDA_LAUNCH_CHECK("bsmm_dw (gate runs)");
  } else {
    partial = empty({chunks * elems}, TensorOptions(DType::f32).device(Device::cuda(device)));
    p.dw = partial.data_ptr();
    p.accumulate = false;
    constexpr auto kernel = &gate_gradient_kernel<T, float>;
    const int persistent = persistent_grid<kernel>(kGSmemBytes);
    kernel<<<std::min(items, persistent), kThreads, kGSmemBytes, stream>>>(map_x, map_dy, p, runs.col_ptr, runs.q,
                                                                          evict_first, items, chunk_steps, elems);
    TS_CUDA_LAUNCH_CHECK("bsmm_dw (gate runs, chunks of n)");
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((elems / 4 + threads - 1) / threads, 8 * persistent));
    sum_parts_kernel<TO><<<blocks, threads, 0, stream>>>(static_cast<const float*>(partial.data_ptr()),
                                                         static_cast<TO*>(g.dw), elems, chunks, g.accumulate);
    TS_CUDA_LAUNCH_CHECK("bsmm_dw (gate runs, sum of chunks)");
  }
  g_launches.fetch_add(1, std::memory_order_relaxed);
  g_gate_launches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

uint64_t gate_launch_count() { return g_gate_launches.load(std::memory_order_relaxed); }

bool gate_gradient_wanted(const BlockGradient& g, int device) {
  if (!env_switch("TESSERA_BSMM_DW_GATE_RUNS", "0", "1", true)) return false;  // 1 (the default) or 0
  return g.bs == kGBs && g.gate == nullptr && !g.transposed && gradient_supported(g, device);
}

void gate_gradient(const BlockGradient& g, const GateRuns& runs, int device, cudaStream_t stream) {
  if (runs.runs == 0) return;
  dispatch_types(g.in_dtype, g.out_dtype, [&](auto tin, auto tout) {
    using T = typename decltype(tin)::type;
    using TO = typename decltype(tout)::type;
    launch_gates<T, TO>(g, runs, device, stream);
  });
}

}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
