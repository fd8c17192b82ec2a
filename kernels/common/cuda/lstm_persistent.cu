// Persistent LSTM recurrence kernels: all T steps of lstm_recurrence (forward) or of its
// backpropagation through time in one launch, with W_h resident in shared memory.
//
// Work split. The H hidden units are cut into groups of U consecutive units (U = 8, 16, 32 or
// 64; for block-sparse weights U divides the block size). A thread block owns one or more groups
// for the whole launch and keeps their slice of W_h in shared memory, loaded once:
//   forward   the 4U gate columns g·H + u0 … (g = i, f, o, u) over the K rows that are stored
//             (dense: all H rows; sparse: the block rows of the group's per-gate block column,
//             the same for the four gates): a [K, 4U] tile, so that step t's product
//             P [B, 4U] = h_{t−1}[:, K rows] · W_slice is whole in the block and the gate
//             nonlinearities and the cell update follow in place (c stays in shared memory);
//   backward  the U rows u0 … of W_h over its stored columns (dense: all 4H; sparse: the blocks
//             of the group's block row), transposed to [K, U]: dh [B, U] = dpre_{t+1}[:, K] · W_sliceᵀ,
//             then the gate gradients of the group's units (dc stays in shared memory).
// Each step reads the previous step's h (or dpre) from L2 in stages of 128 or 256 K columns
// through a cp.async ring as deep as the shared memory left over allows (2 … 15 stages),
// multiplies with mma.sync m16n8k16 (bf16/f16, f32 accumulators; 16 warps tile M = B rows and the
// N columns, and split K when the tiles are fewer than the warps), and writes its slice of h_t
// (dpre_t) to global memory. The blocks then meet at a grid-wide barrier (a counter in global
// memory, zeroed before the launch) before the next step reads it. mma.sync and cp.async run on
// sm_80 and sm_90 alike (a TMA + mbarrier variant of the ring was slower on the H200: see
// docs/lstm_gpu.md).
// Dense layers split K over pairs of blocks (a thread block cluster; see lstm_persistent_kernel),
// so that each reads half of the step's operand.
// Split groups: where a block-sparse layout's largest groups' slices do not fit one block (the hubs
// of a Barabási–Albert layout), the plan cuts those groups' K into parts, each alone in a block
// (recurrence_items.h). A part k > 0 writes its f32 sums of the step to L2 and raises its flag to
// the phase; the owner (part 0) waits for its parts' flags and adds their sums in part order
// before its epilogue, in one pass with kFoldBatch L2 reads in flight per thread (not one read per
// element in the epilogue: the Barabási–Albert layer's forward 31.1 → 27.7 µs per step on the
// H100). The parts wait on nothing and the launch is cooperative, so the wait ends.
// Streamed W: where a block's slices of W_h do not fit its shared memory (dense H 2048 and the
// layers of its parameter count), each group's first stages stay resident and the block copies
// the rest to its own image in global memory at the start of the launch; each later stage's W
// rows then come from L2 into the ring slot beside the stage's operand (kStream).
// The launch is cooperative: the driver guarantees that all blocks are resident at once (or
// refuses it), so the barrier cannot wait on a block that never runs, whatever else shares the
// GPU. Every sum has a fixed order (each output element is summed by one thread, K in order, then
// the K-split partials in order): the same inputs give the same bits.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/cuda/check.cuh"
#include "core/cuda/runtime.h"
#include "kernels/common/cuda/device_math.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/layout_tables.h"
#include "kernels/common/cuda/lstm_gate_math.cuh"
#include "kernels/common/cuda/lstm_persistent.h"
#include "kernels/common/cuda/mma_sm80.cuh"
#include "kernels/common/recurrence_geometry.h"

namespace tessera {
namespace cuda {

namespace {

using sm80::cp_async16;
using sm80::cp_async_commit;
using sm80::cp_async_wait;

// the kernels' shapes and shared-memory budget, shared with the plan (recurrence_plan.cpp)
using namespace recurrence;

struct Params {
  int steps, batch, hidden, groups, bs;  // bs 0: dense
  int chunk, log_chunk;                  // K columns per chunk (a power of 2) and its log2
  int w_rows;                            // rows of the W region per block (all its groups)
  int ring, stage_k;                     // stages in the cp.async ring, K columns per stage
  int groups_per_block;
  float forget_bias;
  const void* w;
  const int32_t* col_ptr;
  const int32_t* col_blocks;
  const int32_t* block_row;
  const int32_t* row_ptr;
  const int32_t* block_col;
  // forward
  const void* gx;
  const void* bias;  // [4H] in gx's dtype, added to every row of gx; null: none
  const void* h0;
  const void* c0;
  void* y;
  void* h_last;
  void* c_last;
  float* gates;
  float* cells;
  // backward (gates, cells, c0 as above)
  const void* dy;
  const void* dh_last;
  const void* dc_last;
  void* dpre;
  void* dh0;
  void* dc0;
  unsigned* counter;
  // split groups (n_items > 0): block b's items are [item_first[b], item_first[b + 1]); a part
  // k > 0 of a group writes its f32 sums [64, N] to partials[item] and then flags[item] = phase + 1;
  // the owner (part 0, item i) adds those of items i + 1 … i + parts − 1 in order.
  int n_items;
  float* partials;
  unsigned* flags;
  uint16_t item_first[kMaxItemBlocks + 1];
  uint16_t it_group[kMaxItems], it_begin[kMaxItems], it_end[kMaxItems];
  uint8_t it_part[kMaxItems], it_parts[kMaxItems];
  // streamed W (img_rows > 0): stages s < res_stages of a group's product read W's slice from
  // shared memory, later ones from the block's image of its groups' remaining rows, img +
  // blockIdx.x·img_rows·N (each group's rows res_stages·128 … in whole stages, in the
  // shared-memory layout, built by the block at the start of the launch), copied into the ring
  // beside the stage's operand
  int res_stages, img_rows;
  void* img;
};
static_assert(sizeof(Params) <= 4000, "kernel parameters are limited to 4 KB");

constexpr int kFoldBatch = 8;  // elements whose parts' sums an owner thread reads at once

// All blocks arrive, then wait until `target` arrivals are counted (the n-th barrier of a launch
// waits for n·gridDim.x). Thread 0's fence publishes the block's writes before its arrival; the
// fence after the wait orders the block's later reads after everyone's writes.
__device__ __forceinline__ void grid_barrier(unsigned* counter, unsigned target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1u);
    unsigned seen;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
    } while (seen < target);
    __threadfence();
  }
  __syncthreads();
}

// Shared-memory-address forms of the copy and fragment loads (the hot loops keep 32-bit
// shared addresses instead of converting generic pointers each time).
__device__ __forceinline__ void cp_async16_s(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2_t(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

// The cluster's blocks meet (release / acquire: the shared-memory writes before it are visible to
// the peers' reads after it); a block barrier too. Distributed shared memory: the address of a
// peer block's copy of a shared variable, and a load from it. Compute capability 9.0 only: the
// host launches clusters only for kernels built for it (resident_clusters).
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ uint32_t peer_smem(uint32_t addr, int rank) {
  uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
#endif
  return r;
}
__device__ __forceinline__ float ld_peer_f32(uint32_t addr) {
  float v = 0.f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
#endif
  return v;
}

// cp.async.wait_group with a run-time count (the ring depth is chosen at launch).
__device__ __forceinline__ void cp_async_wait_n(int n) {
  switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    case 6: cp_async_wait<6>(); break;
    case 7: cp_async_wait<7>(); break;
    case 8: cp_async_wait<8>(); break;
    case 9: cp_async_wait<9>(); break;
    case 10: cp_async_wait<10>(); break;
    case 11: cp_async_wait<11>(); break;
    case 12: cp_async_wait<12>(); break;
    case 13: cp_async_wait<13>(); break;
    default: cp_async_wait<14>(); break;
  }
}

// 16-byte copies of `rows` rows of `row_bytes` (a multiple of 16) from global to shared memory.
__device__ __forceinline__ void copy_rows(void* dst, int dst_stride, const void* src, int64_t src_stride, int rows,
                                          int row_bytes) {
  const int per_row = row_bytes / 16;
  for (int p = threadIdx.x; p < rows * per_row; p += kThreads) {
    const int r = p / per_row, c = p % per_row;
    cp_async16(static_cast<char*>(dst) + r * dst_stride + c * 16,
               static_cast<const char*>(src) + r * src_stride + c * 16, true);
  }
}

// kCluster > 1: the K split over a thread block cluster (see lstm_persistent_kernel); a block's
// product then has the columns of the cluster's kCluster·U units.
template <class T, int U, bool kBackward, int kCluster = 1>
struct Kernel {
  static constexpr int CU = kCluster * U;                  // units of the cluster
  static constexpr int N = kBackward ? CU : 4 * CU;        // columns of the product
  static constexpr int TN = N >= 16 ? 16 : 8;               // columns of one warp tile
  static constexpr int kPairs = 4 * (N / TN) > kWarps ? 4 * (N / TN) / kWarps : 1;  // tiles per warp, at most
  static constexpr int RS = N + 4;                          // f32 partial-sum row stride
  // forward: gx_t [64, 4U] staged in shared memory; the backward's epilogue inputs go to registers
  static constexpr int kEpBytes = epilogue_bytes(U, kBackward);
  // (row, unit) pairs of one group per thread in the backward epilogue
  static constexpr int kEpPerThread = kMaxBatch * U / kThreads > 0 ? kMaxBatch * U / kThreads : 1;
  // The product loop takes kRound K slices of a warp per round, all their fragments loaded before
  // any multiplies; a warp with one tile sums the odd slices in a second accumulator set (two
  // dependent HMMA chains of half the length). Two where a warp has at most two tiles, except in
  // the backward at 64 units, whose epilogue inputs (7 floats for each of a thread's 8 (row, unit)
  // pairs) stay in registers across the product and would spill; else one (four tiles per warp
  // overlap their fragment loads already). Four slices per round (U ≤ 16) measured no faster
  // (dense H1024 8.53 against 8.49 ms, 2026-12-03).
  static constexpr int kRound = kPairs <= 2 && !(kBackward && kEpPerThread > 4) ? 2 : 1;

  // W_h's slice is [rows, N] without padding; the 16-byte chunk c of row r sits at chunk
  // swizzle(r, c), so that the 8 rows one ldmatrix phase reads fall on distinct banks.
  __host__ __device__ static constexpr int swizzle(int r, int c) {
    return N / 8 >= 8 ? c ^ (r & 7) : N / 8 == 4 ? c ^ ((r >> 1) & 3) : N / 8 == 2 ? c ^ ((r >> 2) & 1) : c;
  }
  __host__ __device__ static constexpr int w_index(int r, int col) {
    return r * N + swizzle(r, col / 8) * 8 + col % 8;
  }

  // Dynamic shared memory: [W region][ring ∪ partial sums][epilogue staging][state][chunk tables]
  // (recurrence_geometry.h).
  __device__ static size_t red_bytes(int wk) { return partial_sum_bytes(N, wk); }
  // The product column of column col of the block's own group (gate col / U, unit col % U):
  // gate-major over the cluster's units, this block's units at rank·U.
  __device__ static int own_column(int col, int rank) { return (col / U) * CU + rank * U + col % U; }
};

// The K split over a cluster (kCluster > 1, dense layers): the kCluster blocks of a cluster
// (consecutive blockIdx.x) share kCluster groups of U units; block rank r holds W_h's slice for
// all kCluster·U units over the r-th kCluster-th of K (forward: the H rows, of the 4 gate columns
// of every unit; backward: the 4H columns), so it reads only that part of h_{t−1} (dpre_{t+1})
// per step: the whole operand once per cluster instead of once per block. Its partial product
// [B, N] stays in its shared memory; after a cluster barrier each block sums the columns of its
// own group from every peer (distributed shared memory, ranks in order) and runs that group's
// epilogue.
// kStream: streamed W (Params::img; a template parameter so that the kernels without it keep their
// registers: the U 64 backward has none to spare).
template <class T, int U, bool kBackward, int kCluster = 1, bool kStream = false>
__global__ void __launch_bounds__(kThreads, 1) lstm_persistent_kernel(Params p) {
  using K = Kernel<T, U, kBackward, kCluster>;
  constexpr int N = K::N, TN = K::TN, RS = K::RS;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int B = p.batch, H = p.hidden, G4 = 4 * H;
  const int mt_count = (B + 15) / 16;
  const int tiles = mt_count * (N / TN);
  const int wk_count = k_split(tiles);
  const int R = p.ring;

  // carve shared memory
  T* w_s = reinterpret_cast<T*>(smem);
  unsigned char* ring_base = smem + static_cast<size_t>(p.w_rows) * N * 2;
  // (streamed W: stages of 128 K rows always, so that the ring's strides are constants)
  const int stage_k = kStream ? 128 : p.stage_k, stage_stride = stage_k + 8, stage_b = stage_bytes(stage_k);
  // a ring slot: the operand's stage, then (streamed W) the stage's W rows [stage_k, N]
  constexpr bool streamed = kStream;
  const int slot_b = stage_b + (streamed ? stage_k * N * 2 : 0);
  const size_t ring_bytes = static_cast<size_t>(R) * slot_b;
  const size_t red_bytes = K::red_bytes(wk_count);
  unsigned char* ep_base = ring_base + (red_bytes > ring_bytes ? red_bytes : ring_bytes);
  float* state = reinterpret_cast<float*>(ep_base + K::kEpBytes);  // [groups of this block][64][U]
  int32_t* a_col = reinterpret_cast<int32_t*>(state + p.groups_per_block * kMaxBatch * U);
  T* ring = reinterpret_cast<T*>(ring_base);
  float* red = reinterpret_cast<float*>(ring_base);

  // ---- the block's groups: chunk lists (A-source column of each chunk) and W slices ----
  // (with kCluster > 1: cluster c = blockIdx.x / kCluster takes the units of kCluster groups
  // c·kCluster …, its block of rank r the epilogue of group c·kCluster + r and the r-th part of K)
  const int crank = blockIdx.x % kCluster;
  int n_groups = 0;
  int g_unit0[kMaxGroupsPerBlock], g_chunks[kMaxGroupsPerBlock], g_chunk0[kMaxGroupsPerBlock],
      g_wrow0[kMaxGroupsPerBlock];
  int g_item[kMaxGroupsPerBlock];  // split groups: the group's item (-1: none)
  int g_img0[kStream ? kMaxGroupsPerBlock : 1];  // streamed W: the group's first row in the block's image
  {
    int chunk_at = 0, row_at = 0, img_at = 0;
    const int i0 = p.n_items > 0 ? p.item_first[blockIdx.x] : 0, i1 = p.n_items > 0 ? p.item_first[blockIdx.x + 1] : 0;
    for (int k = 0; n_groups < kMaxGroupsPerBlock; ++k) {
      const int item = p.n_items > 0 ? i0 + k : -1;
      const int grp = p.n_items > 0 ? (item < i1 ? p.it_group[item] : p.groups) : blockIdx.x + k * gridDim.x;
      if (grp >= p.groups) break;
      const int u0 = grp * U;
      int nch;
      if (item >= 0) {
        nch = p.it_end[item] - p.it_begin[item];
      } else if (p.bs == 0) {
        nch = (kBackward ? G4 : H) / p.chunk / kCluster;
      } else if (!kBackward) {
        const int c0 = u0 / p.bs;
        nch = p.col_ptr[c0 + 1] - p.col_ptr[c0];
      } else {
        const int r0 = u0 / p.bs;
        nch = p.row_ptr[r0 + 1] - p.row_ptr[r0];
      }
      g_item[n_groups] = item;
      g_unit0[n_groups] = u0;
      g_chunks[n_groups] = nch;
      g_chunk0[n_groups] = chunk_at;
      g_wrow0[n_groups] = row_at;
      chunk_at += nch;
      const int k_rows = (nch * p.chunk + 15) / 16 * 16;
      if constexpr (kStream) {  // resident: its first res_stages stages; the image: the rest, whole stages
        const int res_rows = p.res_stages * kStreamStageK;
        g_img0[n_groups] = img_at;
        row_at += min(k_rows, res_rows);
        img_at += max(0, (k_rows + kStreamStageK - 1) / kStreamStageK * kStreamStageK - res_rows);
      } else {
        row_at += k_rows;
      }
      ++n_groups;
    }
  }
  // zero the W region (rows past a group's K stay zero), then fill; streamed W: rows res_rows …
  // go to the block's image in global memory instead, in the same layout (rows counted from res_rows)
  for (int i = tid; i < p.w_rows * N / 8; i += kThreads) reinterpret_cast<uint4*>(w_s)[i] = make_uint4(0, 0, 0, 0);
  __syncthreads();
  const T* w = static_cast<const T*>(p.w);
  const int res_rows = streamed ? p.res_stages * stage_k : 0;
  for (int gi = 0; gi < n_groups; ++gi) {
    const int u0 = g_unit0[gi], nch = g_chunks[gi];
    const int b0 = g_item[gi] >= 0 ? p.it_begin[g_item[gi]] : 0;  // a part's first chunk
    T* wg = w_s + static_cast<size_t>(g_wrow0[gi]) * N;
    // streamed W: the group's rows from res_rows on go to its part of the block's image
    T* img = streamed ? static_cast<T*>(p.img) + (static_cast<size_t>(blockIdx.x) * p.img_rows + g_img0[gi]) * N
                      : nullptr;
    auto w_at = [&](int k, int col) {
      if constexpr (streamed) {
        if (k >= res_rows) return img + K::w_index(k - res_rows, col);
      }
      return wg + K::w_index(k, col);
    };
    int32_t* cols = a_col + g_chunk0[gi];
    for (int j = tid; j < nch; j += kThreads) {
      if (p.bs == 0) {
        cols[j] = (crank * nch + j) * p.chunk;
      } else if (!kBackward) {
        cols[j] = p.block_row[p.col_blocks[p.col_ptr[u0 / p.bs] + b0 + j]] * p.bs;
      } else {
        cols[j] = p.block_col[p.row_ptr[u0 / p.bs] + b0 + j] * p.bs;
      }
    }
    const int rows = nch * p.chunk;
    if (!kBackward) {
      // wg(k, g·CU + j) = W_h[row k of the chunk list][g·H + uc + j] for the CU units from the
      // cluster's first uc, 8 elements per copy
      constexpr int CU = K::CU, per_row = N / 8;
      const int uc = u0 - crank * U;
      for (int e = tid; e < rows * per_row; e += kThreads) {
        const int k = e / per_row, v = e % per_row, g = v / (CU / 8), j8 = (v % (CU / 8)) * 8;
        const T* src;
        if (p.bs == 0) {
          src = w + static_cast<int64_t>(crank * rows + k) * G4 + g * H + uc + j8;
        } else {
          const int bs = p.bs, q = H / bs, c0 = u0 / bs, ch = k / bs, kk = k % bs;
          const int blk = p.col_blocks[p.col_ptr[g * q + c0] + b0 + ch];
          src = w + (static_cast<int64_t>(blk) * bs + kk) * bs + (uc - c0 * bs) + j8;
        }
        *reinterpret_cast<uint4*>(w_at(k, g * CU + j8)) = *reinterpret_cast<const uint4*>(src);
      }
    } else {
      // wg(k, j) = W_h[uc + j][column k of the chunk list] for the N units from the cluster's first
      // uc (transposed; one element per load, consecutive threads on consecutive columns)
      const int uc = u0 - crank * U;
      for (int e = tid; e < rows * N; e += kThreads) {
        const int j = e / rows, k = e % rows;
        T v;
        if (p.bs == 0) {
          v = w[static_cast<int64_t>(uc + j) * G4 + crank * rows + k];
        } else {
          const int bs = p.bs, r0 = u0 / bs, ch = k / bs, kk = k % bs;
          const int blk = p.row_ptr[r0] + b0 + ch;
          v = w[(static_cast<int64_t>(blk) * bs + (uc - r0 * bs) + j) * bs + kk];
        }
        *w_at(k, j) = v;
      }
    }
    // the image's rows past the group's K, up to whole stages: zeros (the product reads them up to
    // whole 16-row slices, and the ring copies whole stages)
    if constexpr (streamed) {
      const int z0 = max(rows, res_rows), z1 = (rows + stage_k - 1) / stage_k * stage_k;
      for (int e = tid; e < (z1 - z0) * N; e += kThreads) img[static_cast<size_t>(z0 - res_rows) * N + e] = from_acc<T>(0.f);
    }
    // initial state: c0 (forward) or dcT (backward), f32
    const T* s0 = static_cast<const T*>(kBackward ? p.dc_last : p.c0);
    float* st = state + gi * kMaxBatch * U;
    for (int e = tid; e < B * U; e += kThreads)
      st[e] = to_acc(s0[static_cast<int64_t>(e / U) * H + u0 + e % U]);
  }
  if constexpr (streamed) __threadfence();  // the image's writes before the ring's cp.async reads of them (L2)
  __syncthreads();


  const int lda = kBackward ? G4 : H;
  const uint32_t ring_s = sm80::smem_addr(ring);

  // Per launch: this thread's 16-byte pieces of every stage: K column copy_col of rows
  // copy_row0 + copy_row_step·i (kThreads is a multiple of a stage's pieces per row).
  constexpr int kCopies = kMaxBatch * (kMaxStageK / 8) / kThreads;
  const int log_ppr = stage_k == 256 ? 5 : 4;
  const int copy_col = (tid & ((1 << log_ppr) - 1)) * 8, copy_row0 = tid >> log_ppr, copy_row_step = kThreads >> log_ppr;
  const int copy_row_end = mt_count * 16;  // rows of the product (B padded to 16)
  // Per launch: this warp's tiles of the product (kPairs of them, or one tile and a share of the
  // K slices when the tiles are fewer than the warps) and their fragment addresses within a stage /
  // a 16-row slice of W (the swizzle depends on the row only modulo 8, so on the lane only).
  const int wk = wk_count > 1 ? warp / tiles : 0;
  const bool warp_active = wk_count > 1 ? warp < tiles * wk_count : true;
  uint32_t a_off[K::kPairs], b_off[K::kPairs];
  bool tile_on[K::kPairs];
#pragma unroll
  for (int i = 0; i < K::kPairs; ++i) {
    const int tile = wk_count > 1 ? warp % tiles : warp + kWarps * i;
    tile_on[i] = warp_active && !(wk_count > 1 && i > 0) && tile < tiles;
    const int mt = tile % mt_count, nt = tile / mt_count;
    a_off[i] = ((mt * 16 + (lane & 15)) * stage_stride + (lane >> 4) * 8) * 2;
    if constexpr (TN == 16) {
      b_off[i] = K::w_index((lane & 7) + ((lane >> 3) & 1) * 8, nt * 16 + (lane >> 4) * 8) * 2;
    } else {
      b_off[i] = K::w_index(lane & 15, nt * 8) * 2;
    }
  }
  uint32_t red_peer[kCluster];  // the partial sums of every block of the cluster (distributed shared memory)
#pragma unroll
  for (int r = 0; r < kCluster; ++r) red_peer[r] = kCluster > 1 ? peer_smem(sm80::smem_addr(red), r) : 0;
  const int phases = kBackward ? p.steps + 1 : p.steps;  // backward: T steps, then dh0
  unsigned barriers = 0;
  for (int ph = 0; ph < phases; ++ph) {
    // forward step t = ph reads h_{t−1}; backward phase ph < T is step t = T−1−ph, reading
    // dpre_{t+1} (none at t = T−1); phase T computes dh0 = dpre_0·W_hᵀ.
    const int t = kBackward ? p.steps - 1 - ph : ph;
    const bool final_phase = kBackward && ph == p.steps;
    const bool has_product = !kBackward || ph > 0;
    const bool last = kBackward ? final_phase : ph == p.steps - 1;
    const T* a_src;
    if (!kBackward) {
      a_src = t == 0 ? static_cast<const T*>(p.h0) : static_cast<const T*>(p.y) + static_cast<int64_t>(t - 1) * B * H;
    } else {
      a_src = static_cast<const T*>(p.dpre) + static_cast<int64_t>(t + 1) * B * G4;  // unused at ph 0
    }
    for (int gi = 0; gi < n_groups; ++gi) {
      const int u0 = g_unit0[gi], nch = g_chunks[gi];
      // a split group's part k > 0 only hands its sums to the owner (part 0), which runs the epilogue
      const int item = g_item[gi];
      // (read from the parameters where used: registers are short in the U 64 backward)
      auto owner = [&] { return item < 0 || p.it_part[item] == 0; };
      auto parts = [&] { return item >= 0 ? static_cast<int>(p.it_parts[item]) : 1; };
      const int32_t* cols = a_col + g_chunk0[gi];
      const T* wg = w_s + static_cast<size_t>(g_wrow0[gi]) * N;
      const int k_rows = (nch * p.chunk + 15) / 16 * 16;  // the group's K, in whole k16 slices
      const int n_stages = has_product ? (k_rows + stage_k - 1) / stage_k : 0;

      // epilogue inputs of this step: the forward's gx_t in the first copy group; the
      // backward's into registers (read in the epilogue, after the product)
      if (!kBackward && owner()) {
        const T* gx = static_cast<const T*>(p.gx) + static_cast<int64_t>(t) * B * G4 + u0;
        for (int g = 0; g < 4; ++g)
          copy_rows(ep_base + g * U * 2, 4 * U * 2, gx + g * H, static_cast<int64_t>(G4) * 2, B, U * 2);
      }
      float e_gate[kBackward ? K::kEpPerThread : 1][4], e_c[kBackward ? K::kEpPerThread : 1],
          e_cp[kBackward ? K::kEpPerThread : 1], e_dy[kBackward ? K::kEpPerThread : 1];
      if (kBackward && !final_phase && owner()) {
#pragma unroll
        for (int q = 0; q < K::kEpPerThread; ++q) {
          const int e = tid + q * kThreads, b = e / U, j = e % U;
          if (b >= B) continue;
          const int64_t bt = (static_cast<int64_t>(t) * B + b) * H + u0 + j;
          const float* gt = p.gates + (static_cast<int64_t>(t) * B + b) * G4 + u0 + j;
#pragma unroll
          for (int g = 0; g < 4; ++g) e_gate[q][g] = gt[g * H];
          e_c[q] = p.cells[bt];
          e_cp[q] = t > 0 ? p.cells[bt - static_cast<int64_t>(B) * H]
                          : to_acc(static_cast<const T*>(p.c0)[static_cast<int64_t>(b) * H + u0 + j]);
          e_dy[q] = to_acc(static_cast<const T*>(p.dy)[bt]);
        }
      }

      // stage s of the product: K columns s·stage_k … of the group's chunk list, rows 0 … 16·mt_count
      // (pad rows and columns past the list get zeros).
      auto load_stage = [&](int s, int slot) {
        const uint32_t dst = ring_s + slot * slot_b;
        const int kk = s * stage_k + copy_col, ch = kk >> p.log_chunk;
        const T* src0 = ch < nch ? a_src + cols[ch] + (kk & (p.chunk - 1)) : nullptr;
#pragma unroll
        for (int i = 0; i < kCopies; ++i) {
          const int r = copy_row0 + copy_row_step * i;
          if (r >= copy_row_end) break;
          const bool valid = src0 != nullptr && r < B;
          cp_async16_s(dst + (r * stage_stride + copy_col) * 2, valid ? src0 + r * lda : a_src, valid);
        }
        if constexpr (streamed) {
          if (s >= p.res_stages) {  // W's rows of the stage: a whole stage of the image, contiguous
            constexpr int kPieces = 128 * N / 8, kWCopies = (kPieces + kThreads - 1) / kThreads;
            const T* src = static_cast<const T*>(p.img) +
                           (static_cast<size_t>(blockIdx.x) * p.img_rows + g_img0[gi] + (s - p.res_stages) * 128) * N;
#pragma unroll
            for (int i = 0; i < kWCopies; ++i) {
              const int q = tid + i * kThreads;
              if (kPieces % kThreads == 0 || q < kPieces) cp_async16_s(dst + stage_b + q * 16, src + q * 8, true);
            }
          }
        }
      };

      float acc[K::kPairs][TN / 8][4], acc_odd[TN / 8][4];  // acc_odd: the odd slices when a warp has one tile
#pragma unroll
      for (int q = 0; q < TN / 8; ++q)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          acc_odd[q][e] = 0.f;
#pragma unroll
          for (int i = 0; i < K::kPairs; ++i) acc[i][q][e] = 0.f;
        }
      const uint32_t wg_s = sm80::smem_addr(wg);

      int load_slot = 0, use_slot = 0;  // ring slots of the next stage to load / to multiply
      for (int s = 0; s < R - 1; ++s) {
        if (s < n_stages) {
          load_stage(s, load_slot);
          load_slot = load_slot + 1 == R ? 0 : load_slot + 1;
        }
        cp_async_commit();
      }
      const int k_slices = k_rows / 16, slices = stage_k / 16;
      // One block barrier per stage: stage s lands, then the barrier, after which every warp is
      // past stage s − 1, whose slot then takes stage s + R − 1.
      for (int s = 0; s < n_stages; ++s) {
        cp_async_wait_n(R - 2);
        __syncthreads();
        if (s + R - 1 < n_stages) {
          load_stage(s + R - 1, load_slot);
          load_slot = load_slot + 1 == R ? 0 : load_slot + 1;
        }
        cp_async_commit();
        const uint32_t a_stage = ring_s + use_slot * slot_b;
        use_slot = use_slot + 1 == R ? 0 : use_slot + 1;
        if (!tile_on[0]) continue;
        // the K-split: global slice s·slices + sl belongs to warp set (s·slices + sl) mod wk_count
        const int s0 = s * slices, end = min(slices, k_slices - s0);
        const uint32_t w_stage = streamed && s >= p.res_stages ? a_stage + stage_b : wg_s + s0 * 16 * N * 2;
        // one slice: A [16 rows, 16 K] of the stage, B [16 K, TN] of W, per tile of this warp
        auto load_slice = [&](uint32_t (&a)[K::kPairs][4], uint32_t (&b)[K::kPairs][TN / 4], int sl) {
#pragma unroll
          for (int i = 0; i < K::kPairs; ++i) {
            if (!tile_on[i]) continue;
            ldsm_x4(a[i], a_stage + a_off[i] + sl * 32);
            if constexpr (TN == 16) {
              ldsm_x4_t(b[i], w_stage + sl * 16 * N * 2 + b_off[i]);
            } else {
              uint32_t (&b2)[2] = reinterpret_cast<uint32_t (&)[2]>(b[i]);
              ldsm_x2_t(b2, w_stage + sl * 16 * N * 2 + b_off[i]);
            }
          }
        };
        auto mma_slice = [&](float (&c)[TN / 8][4], const uint32_t (&a)[4], const uint32_t (&b)[TN / 4]) {
          const uint32_t b0[2] = {b[0], b[1]};
          sm80::mma_16816<T>(c[0], a, b0);
          if constexpr (TN == 16) {
            const uint32_t b1[2] = {b[2], b[3]};
            sm80::mma_16816<T>(c[1], a, b1);
          }
        };
        int sl = (wk - s0) & (wk_count - 1);  // this warp's first slice in the stage
        constexpr int kRound = K::kRound;
        for (; kRound > 1 && sl + (kRound - 1) * wk_count < end; sl += kRound * wk_count) {
          uint32_t a[kRound][K::kPairs][4], b[kRound][K::kPairs][TN / 4];
#pragma unroll
          for (int r = 0; r < kRound; ++r) load_slice(a[r], b[r], sl + r * wk_count);
#pragma unroll
          for (int r = 0; r < kRound; ++r)
#pragma unroll
            for (int i = 0; i < K::kPairs; ++i) {
              if (!tile_on[i]) continue;
              if constexpr (K::kPairs == 1) {
                mma_slice(r % 2 ? acc_odd : acc[0], a[r][0], b[r][0]);
              } else {
                mma_slice(acc[i], a[r][i], b[r][i]);
              }
            }
        }
        for (; sl < end; sl += wk_count) {
          uint32_t a0[K::kPairs][4], b0[K::kPairs][TN / 4];
          load_slice(a0, b0, sl);
#pragma unroll
          for (int i = 0; i < K::kPairs; ++i)
            if (tile_on[i]) mma_slice(acc[i], a0[i], b0[i]);
        }
      }
      if constexpr (K::kRound > 1 && K::kPairs == 1) {
#pragma unroll
        for (int q = 0; q < TN / 8; ++q)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[0][q][e] += acc_odd[q][e];
      }
      if (n_stages > 0) __syncthreads();  // the partial sums overwrite the ring
      cp_async_wait<0>();  // the epilogue inputs (and empty groups)

      // partial sums to shared memory: red[wk][row][col]
      if (n_stages > 0) {
#pragma unroll
        for (int i = 0; i < K::kPairs; ++i) {
          if (!tile_on[i]) continue;
          const int tile = wk_count > 1 ? warp % tiles : warp + kWarps * i;
          const int mt = tile % mt_count, nt = tile / mt_count;
#pragma unroll
          for (int q = 0; q < TN / 8; ++q) {
            const int row = mt * 16 + lane / 4, col = nt * TN + q * 8 + (lane % 4) * 2;
            float* r0 = red + (static_cast<size_t>(wk) * kMaxBatch + row) * RS + col;
            *reinterpret_cast<float2*>(r0) = make_float2(acc[i][q][0], acc[i][q][1]);
            *reinterpret_cast<float2*>(r0 + 8 * RS) = make_float2(acc[i][q][2], acc[i][q][3]);
          }
        }
      }
      if constexpr (kCluster > 1) {
        cluster_sync();  // every peer's partial sums are written
      } else {
        __syncthreads();
      }
      if (!owner()) {
        // a part: its sums [B, N] (K-split partials in order) to L2, then the flag of this phase
        if (has_product) {
          float* dst = p.partials + static_cast<size_t>(item) * kMaxBatch * N;
          for (int e = tid; e < B * N; e += kThreads) {
            const int b = e / N, col = e % N;
            float v = 0.f;
            for (int q = 0; q < wk_count; ++q) v += red[(static_cast<size_t>(q) * kMaxBatch + b) * RS + col];
            __stcg(dst + b * N + col, v);
          }
          __syncthreads();
          if (tid == 0) {
            __threadfence();
            asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(p.flags + item), "r"(static_cast<unsigned>(ph + 1))
                         : "memory");
          }
        }
        __syncthreads();  // red is reused by the next item
        continue;
      }
      bool folded = false;  // red[0] holds the whole product (the parts' sums added)
      if (parts() > 1 && has_product) {
        // the owner: its parts' sums of this phase are in L2 once their flags say ph + 1 (the parts
        // wait on nothing, and every block is resident: no deadlock)
        if (tid == 0) {
          for (int k = 1; k < parts(); ++k) {
            unsigned seen;
            do {
              asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(p.flags + item + k) : "memory");
            } while (seen < static_cast<unsigned>(ph + 1));
          }
          __threadfence();
        }
        __syncthreads();
        // (not in the U 64 backward: it has no registers to spare)
        if constexpr (!kBackward || U < 64) {
          // the owner's sums and its parts' in order, into red[0]: kFoldBatch elements' L2 reads in
          // flight per thread at once (the epilogue's per-element reads wait on L2 one by one)
          const int total = B * N;
          for (int e0 = tid; e0 < total; e0 += kThreads * kFoldBatch) {
            float v[kFoldBatch];
#pragma unroll
            for (int r = 0; r < kFoldBatch; ++r) {
              const int e = e0 + r * kThreads, b = e / N, col = e % N;
              v[r] = 0.f;
              if (e < total && n_stages > 0)
                for (int q = 0; q < wk_count; ++q) v[r] += red[(static_cast<size_t>(q) * kMaxBatch + b) * RS + col];
            }
            for (int k = 1; k < parts(); ++k) {
              const float* part = p.partials + static_cast<size_t>(item + k) * kMaxBatch * N;
#pragma unroll
              for (int r = 0; r < kFoldBatch; ++r) {
                const int e = e0 + r * kThreads;
                if (e < total) v[r] += __ldcg(part + e);
              }
            }
#pragma unroll
            for (int r = 0; r < kFoldBatch; ++r) {
              const int e = e0 + r * kThreads, b = e / N, col = e % N;
              if (e < total) red[static_cast<size_t>(b) * RS + col] = v[r];
            }
          }
          folded = true;
          __syncthreads();
        }
      }

      // epilogue: one thread per (row b, unit j) of the group
      float* st = state + gi * kMaxBatch * U;
      auto product = [&](int b, int col) {
        if (folded) return red[static_cast<size_t>(b) * RS + col];
        float v = 0.f;
        if (n_stages > 0) {
          if constexpr (kCluster > 1) {
            // column col of this block's group, from every peer's partial sums
            const int pc = K::own_column(col, crank);
#pragma unroll
            for (int r = 0; r < kCluster; ++r)
              for (int q = 0; q < wk_count; ++q)
                v += ld_peer_f32(red_peer[r] + ((q * kMaxBatch + b) * RS + pc) * 4);
          } else {
            for (int q = 0; q < wk_count; ++q) v += red[(static_cast<size_t>(q) * kMaxBatch + b) * RS + col];
          }
        }
        // a split group's other parts, in order (L2, not L1: written this phase); none in the
        // backward's phase 0, which has no product (the scratch then holds nothing of this launch)
        if (has_product)
          for (int k = 1; k < parts(); ++k)
            v += __ldcg(p.partials + (static_cast<size_t>(item + k) * kMaxBatch + b) * N + col);
        return v;
      };
      if constexpr (!kBackward) {
        // the bias of this thread's unit j = tid mod U (the same j for every row it visits), per gate
        static_assert(kThreads % U == 0, "a thread's epilogue unit must not change between rows");
        float bias_i = 0.f, bias_f = p.forget_bias, bias_o = 0.f, bias_u = 0.f;
        if (p.bias) {
          const T* bb = static_cast<const T*>(p.bias) + u0 + tid % U;
          bias_i = to_acc(bb[0]), bias_f += to_acc(bb[H]), bias_o = to_acc(bb[2 * H]), bias_u = to_acc(bb[3 * H]);
        }
        for (int e = tid; e < B * U; e += kThreads) {
          const int b = e / U, j = e % U;
          const int64_t hb = static_cast<int64_t>(b) * H + u0 + j;  // [B, H] index
          const T* gx = reinterpret_cast<const T*>(ep_base) + b * 4 * U + j;
          const float i = sigmoid_fast(product(b, j) + to_acc(gx[0]) + bias_i);
          const float f = sigmoid_fast(product(b, U + j) + to_acc(gx[U]) + bias_f);
          const float o = sigmoid_fast(product(b, 2 * U + j) + to_acc(gx[2 * U]) + bias_o);
          const float u = tanh_fast(product(b, 3 * U + j) + to_acc(gx[3 * U]) + bias_u);
          const float c = f * st[b * U + j] + i * u;
          const float h = o * tanh_fast(c);
          st[b * U + j] = c;
          const int64_t th = static_cast<int64_t>(t) * B * H + hb;
          static_cast<T*>(p.y)[th] = from_acc<T>(h);
          p.cells[th] = c;
          float* gt = p.gates + static_cast<int64_t>(t) * B * G4 + static_cast<int64_t>(b) * G4 + u0 + j;
          gt[0] = i, gt[H] = f, gt[2 * H] = o, gt[3 * H] = u;
          if (t == p.steps - 1) {
            static_cast<T*>(p.h_last)[hb] = from_acc<T>(h);
            static_cast<T*>(p.c_last)[hb] = from_acc<T>(c);
          }
        }
      } else {
#pragma unroll
        for (int q = 0; q < K::kEpPerThread; ++q) {
          const int e = tid + q * kThreads, b = e / U, j = e % U;
          if (b >= B) continue;
          const int64_t hb = static_cast<int64_t>(b) * H + u0 + j;
          if (final_phase) {
            static_cast<T*>(p.dh0)[hb] = from_acc<T>(product(b, j));
            continue;
          }
          const float i = e_gate[q][0], f = e_gate[q][1], o = e_gate[q][2], u = e_gate[q][3];
          const float tc = tanh_fast(e_c[q]);
          float dh = product(b, j) + e_dy[q];
          if (ph == 0) dh += to_acc(static_cast<const T*>(p.dh_last)[hb]);
          const float dc = st[b * U + j] + dh * o * (1.f - tc * tc);
          T* dp = static_cast<T*>(p.dpre) + static_cast<int64_t>(t) * B * G4 + static_cast<int64_t>(b) * G4 + u0 + j;
          dp[0] = from_acc<T>(dc * u * i * (1.f - i));
          dp[H] = from_acc<T>(dc * e_cp[q] * f * (1.f - f));
          dp[2 * H] = from_acc<T>(dh * tc * o * (1.f - o));
          dp[3 * H] = from_acc<T>(dc * i * (1.f - u * u));
          st[b * U + j] = dc * f;
          if (t == 0) static_cast<T*>(p.dc0)[hb] = from_acc<T>(dc * f);
        }
      }
      // red and the staging are reused by the next group. With a cluster, the peers read this
      // block's red until their epilogue ends: before the next group (and before the block exits,
      // which ends its shared memory) the cluster meets; before the next step's product the grid
      // barrier, which every peer reaches after its epilogue, orders the same.
      if (kCluster > 1 && (gi + 1 < n_groups || last)) {
        cluster_sync();
      } else {
        __syncthreads();
      }
    }
    if (!last) grid_barrier(p.counter, ++barriers * gridDim.x);
  }
}

// The per-step floor of any persistent recurrence on this grid: `steps` rounds in which every
// block reads the 16 bytes block (b + 1) % grid wrote in the round before, adds, writes its own,
// and meets the others at the grid barrier (exchange = false: the barrier alone). One thread per
// block does the exchange, so the round is one dependent L2 read, one write, the fence and the
// barrier: what a step of h (or dpre) passed between blocks costs before any product. With
// cluster_sync, each round first meets the block's cluster at a hardware cluster barrier.
__global__ void __launch_bounds__(kThreads, 1) step_floor_kernel(int steps, bool exchange, bool cluster_sync,
                                                                uint4* slots, unsigned* counter) {
  const int b = blockIdx.x, next = (b + 1) % gridDim.x;
  uint4 v = make_uint4(b, 0, 0, 0);
  for (int t = 0; t < steps; ++t) {
    if (exchange && threadIdx.x == 0) {
      const uint4* src = slots + static_cast<size_t>(t & 1) * gridDim.x + next;
      uint4 w;
      asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w) : "l"(src));
      v.x += w.x, v.y ^= w.y + t;
      slots[static_cast<size_t>((t + 1) & 1) * gridDim.x + b] = v;
    }
    if (cluster_sync) tessera::cuda::cluster_sync();
    grid_barrier(counter, static_cast<unsigned>(t + 1) * gridDim.x);
  }
}

// The launch attribute that groups `cluster` consecutive blocks into one thread block cluster.
cudaLaunchAttribute cluster_attribute(int cluster) {
  cudaLaunchAttribute a = {};
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim.x = static_cast<unsigned>(cluster);
  a.val.clusterDim.y = 1;
  a.val.clusterDim.z = 1;
  return a;
}

// A cooperative launch of `grid` blocks of kThreads (the driver runs it only when every block
// can be resident at once, so grid_barrier cannot wait on a block that never runs), in clusters
// of `cluster` blocks when cluster > 1.
template <class... KernelArgs, class... Args>
void launch_cooperative(void (*kernel)(KernelArgs...), int grid, size_t smem, cudaStream_t stream, int cluster,
                        Args... args) {
  if (smem > 0)
    TS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  attr[1] = cluster_attribute(cluster);
  cfg.attrs = attr;
  cfg.numAttrs = cluster > 1 ? 2 : 1;
  TS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

template <class T, int U, bool kBackward, int kCluster = 1>
void launch(const Params& prm, const RecurrencePlan& plan, cudaStream_t stream) {
  if (plan.stream_rows > 0) {
    launch_cooperative(lstm_persistent_kernel<T, U, kBackward, kCluster, true>, plan.grid, plan.smem, stream, kCluster,
                       prm);
  } else {
    launch_cooperative(lstm_persistent_kernel<T, U, kBackward, kCluster>, plan.grid, plan.smem, stream, kCluster, prm);
  }
}

template <class T, bool kBackward, int U>
void launch_clustered(const Params& prm, const RecurrencePlan& plan, cudaStream_t stream) {
  if constexpr (has_cluster_kernel(U, 2)) {  // recurrence_geometry.h: the plan's rule
    if (plan.cluster == 2) return launch<T, U, kBackward, 2>(prm, plan, stream);
  }
  TS_CHECK(plan.cluster == 1, ValueError, "lstm_recurrence: no kernel for clusters of " << plan.cluster);
  launch<T, U, kBackward>(prm, plan, stream);
}

template <class T, bool kBackward>
void launch_units(const Params& prm, const RecurrencePlan& plan, cudaStream_t stream) {
  switch (plan.units) {
    case 8: return launch_clustered<T, kBackward, 8>(prm, plan, stream);
    case 16: return launch_clustered<T, kBackward, 16>(prm, plan, stream);
    case 32: return launch<T, 32, kBackward>(prm, plan, stream);
    case 64: return launch<T, 64, kBackward>(prm, plan, stream);
    default: TS_THROW(ValueError, "lstm_recurrence: no kernel for " << plan.units << " units per group");
  }
}

// How many clusters of `cluster` blocks of `kernel` (kThreads each, `smem` bytes of dynamic shared
// memory) can be resident at once; 0 where its binary was not built for compute capability 9.0
// (the cluster barrier and distributed shared memory need it: cluster_sync traps elsewhere).
template <class... KernelArgs>
int max_active_clusters(void (*kernel)(KernelArgs...), int cluster, size_t smem) {
  cudaFuncAttributes fa = {};
  TS_CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
  if (fa.binaryVersion < 90) return 0;
  if (smem > 0)
    TS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(cluster);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr[1] = {cluster_attribute(cluster)};
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  TS_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
  return clusters;
}

template <class T, int U, bool kBackward, int kCluster>
int resident_clusters(size_t smem) {
  return max_active_clusters(lstm_persistent_kernel<T, U, kBackward, kCluster>, kCluster, smem);
}

template <class T, bool kBackward>
int resident_clusters(int units, int cluster, size_t smem) {
  switch (units * 10 + cluster) {
    case 82: return resident_clusters<T, 8, kBackward, 2>(smem);
    case 162: return resident_clusters<T, 16, kBackward, 2>(smem);
    default: return 0;
  }
}

// The same, asked once per (device, dtype, direction, units, cluster) at the device's most shared
// memory per block (the plan runs for every eager call; batch-1 sampling calls it per token).
int resident_clusters(int device, DType dtype, bool backward, int units, int cluster, size_t smem) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, bool, int, int>, int> known;
  const std::tuple<int, int, bool, int, int> key{device, static_cast<int>(dtype), backward, units, cluster};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(key);
  if (it != known.end()) return it->second;
  int n;
  if (dtype == DType::bf16) {
    n = backward ? resident_clusters<__nv_bfloat16, true>(units, cluster, smem)
                 : resident_clusters<__nv_bfloat16, false>(units, cluster, smem);
  } else {
    n = backward ? resident_clusters<__half, true>(units, cluster, smem) : resident_clusters<__half, false>(units, cluster, smem);
  }
  known.emplace(key, n);
  return n;
}

// The plan's view of `device` (recurrence_plan.h): its SMs, compute capability and shared memory
// per block (0 without cooperative launches), asked once, and how many clusters of each kernel fit.
RecurrenceDevice recurrence_device(int device) {
  static RecurrenceDevice cached[64];
  RecurrenceDevice& d = cached[device & 63];
  if (d.sms == 0) {
    int sms = 0, smem = 0;
    TS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    TS_CUDA_CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    int coop = 0;
    TS_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device));
    d.smem = coop ? static_cast<size_t>(smem) : 0;
    TS_CUDA_CHECK(cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, device));
    d.index = device;
    d.clusters = [device, smem_max = d.smem](DType dtype, bool backward, int units, int cluster) {
      return resident_clusters(device, dtype, backward, units, cluster, smem_max);
    };
    d.sms = sms;
  }
  return d;
}

}  // namespace

RecurrencePlan plan_recurrence(int device, DType dtype, int64_t batch, int64_t hidden, const LayoutPtr& layout,
                               bool backward) {
  return tessera::plan_recurrence(recurrence_device(device), dtype, batch, hidden, layout, backward);
}

namespace {

Params base_params(const Tensor& wh, const LayoutPtr& layout, const RecurrencePlan& plan, int64_t steps,
                   int64_t batch, int64_t hidden) {
  Params p = {};
  p.steps = static_cast<int>(steps);
  p.batch = static_cast<int>(batch);
  p.hidden = static_cast<int>(hidden);
  p.groups = plan.groups;
  p.bs = layout ? static_cast<int>(layout->block_size()) : 0;
  p.chunk = plan.chunk;
  p.log_chunk = 0;
  while ((1 << p.log_chunk) < plan.chunk) ++p.log_chunk;
  p.w_rows = plan.w_rows;
  p.ring = plan.ring;
  p.stage_k = plan.stage_k;
  p.groups_per_block = plan.groups_per_block;
  p.res_stages = plan.resident_stages;
  p.img_rows = plan.stream_rows;
  p.w = wh.data_ptr();
  p.n_items = 0;
  if (plan.packing) {
    int idx = 0;
    for (size_t b = 0; b < plan.packing->blocks.size(); ++b) {
      p.item_first[b] = static_cast<uint16_t>(idx);
      for (const RecurrenceItem& it : plan.packing->blocks[b]) {
        p.it_group[idx] = static_cast<uint16_t>(it.group);
        p.it_begin[idx] = static_cast<uint16_t>(it.begin);
        p.it_end[idx] = static_cast<uint16_t>(it.end);
        p.it_part[idx] = static_cast<uint8_t>(it.part);
        p.it_parts[idx] = static_cast<uint8_t>(it.parts);
        ++idx;
      }
    }
    p.item_first[plan.packing->blocks.size()] = static_cast<uint16_t>(idx);
    p.n_items = idx;
  }
  if (layout) {
    const BlockTables t = device_tables(layout, wh.device().index);
    p.col_ptr = t.col_ptr;
    p.col_blocks = t.col_blocks;
    p.block_row = t.block_row;
    p.row_ptr = t.row_ptr;
    p.block_col = t.block_col;
  }
  return p;
}

// A zeroed barrier counter for one launch, stream-ordered (capturable); with split groups also
// their zeroed flags [items] and the scratch of their partial sums [items, 64, N] f32; with
// streamed W the blocks' images, image_bytes (not zeroed: each block writes its own).
struct Counter {
  Counter(int device, cudaStream_t stream, int items = 0, int n = 0, size_t image_bytes = 0) : device_(device) {
    flag_bytes_ = (static_cast<size_t>(1 + items) * sizeof(unsigned) + 255) / 256 * 256;
    partial_bytes_ = (static_cast<size_t>(items) * kMaxBatch * n * sizeof(float) + 255) / 256 * 256;
    bytes_ = flag_bytes_ + partial_bytes_ + image_bytes;
    ptr_ = static_cast<unsigned*>(allocate(bytes_, device));
    TS_CUDA_CHECK(cudaMemsetAsync(ptr_, 0, flag_bytes_, stream));
  }
  ~Counter() { deallocate(ptr_, bytes_, device_); }
  unsigned* flags() const { return ptr_ + 1; }
  float* partials() const { return reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(ptr_) + flag_bytes_); }
  void* image() const { return reinterpret_cast<unsigned char*>(ptr_) + flag_bytes_ + partial_bytes_; }
  unsigned* ptr_;
  size_t flag_bytes_ = 0, partial_bytes_ = 0, bytes_ = 0;
  int device_;
};

// The bytes of the blocks' images of streamed W: grid × stream_rows × N elements of 2 bytes.
size_t image_bytes(const RecurrencePlan& plan, int n) {
  return static_cast<size_t>(plan.grid) * plan.stream_rows * n * 2;
}

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// The wgmma kernels read and write two adjacent units at once (lstm_wgmma_ring.cuh's load_pair):
// every 2-byte tensor they touch that way must start at a 4-byte address (an undefined one, such as
// an absent bias, passes).
bool pairs_aligned(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->defined() && reinterpret_cast<uintptr_t>(t->data_ptr()) % 4 != 0) return false;
  return true;
}

void require_fits(const RecurrencePlan& plan, const char* op) {
  TS_CHECK(plan.reason.empty(), NotImplementedError, op << ": no GPU kernel for this problem: " << plan.reason);
}

}  // namespace

void recurrence_forward(const Tensor& gx, const Tensor& h0, const Tensor& c0, const Tensor& wh, const Tensor& bias,
                        const LayoutPtr& layout, double forget_bias, const Tensor& y, const Tensor& hT,
                        const Tensor& cT, const Tensor& gates, const Tensor& cells) {
  const int device = gx.device().index;
  const int64_t steps = gx.size(0), batch = gx.size(1), hidden = h0.size(1);
  const RecurrencePlan plan = plan_recurrence(device, gx.dtype(), batch, hidden, layout, false);
  require_fits(plan, "lstm_recurrence");
  // the forward on wgmma (dense, or block-sparse) where wanted (wgmma_wanted) and where it fits (its
  // TMA maps need h0, y and the sparse W_h at 16-byte addresses, its pairs 4-byte ones)
  if (wgmma_wanted() && aligned16(h0) && aligned16(y) &&
      pairs_aligned({&gx, &bias, &c0, &hT, &cT})) {
    const bool first = wgmma_streamed_first();  // the W-streamed kernels before the resident ones
    if (first && wgmma_streamed_forward_unfit(device, gx.dtype(), batch, hidden, layout).empty())
      return wgmma_streamed_forward(gx, h0, c0, wh, bias, forget_bias, y, hT, cT, gates, cells);
    if (const int cluster = wgmma_cluster(device, gx.dtype(), batch, hidden, layout, false); cluster > 0)
      return wgmma_forward(cluster, gx, h0, c0, wh, bias, forget_bias, y, hT, cT, gates, cells);
    if (!first && wgmma_streamed_forward_unfit(device, gx.dtype(), batch, hidden, layout).empty())
      return wgmma_streamed_forward(gx, h0, c0, wh, bias, forget_bias, y, hT, cT, gates, cells);
    if (layout && aligned16(wh) && wgmma_sparse_forward_unfit(device, gx.dtype(), batch, hidden, layout).empty())
      return wgmma_sparse_forward(gx, h0, c0, wh, bias, layout, forget_bias, y, hT, cT, gates, cells);
  }
  Params p = base_params(wh, layout, plan, steps, batch, hidden);
  p.forget_bias = static_cast<float>(forget_bias);
  p.gx = gx.data_ptr();
  p.bias = bias.defined() ? bias.data_ptr() : nullptr;
  p.h0 = h0.data_ptr();
  p.c0 = c0.data_ptr();
  p.y = y.data_ptr();
  p.h_last = hT.data_ptr();
  p.c_last = cT.data_ptr();
  p.gates = static_cast<float*>(gates.data_ptr());
  p.cells = static_cast<float*>(cells.data_ptr());
  const cudaStream_t stream = current_stream(y);
  const int n = 4 * plan.cluster * plan.units;  // the product's columns
  Counter counter(device, stream, p.n_items, n, image_bytes(plan, n));
  p.counter = counter.ptr_;
  p.flags = counter.flags();
  p.partials = counter.partials();
  p.img = counter.image();
  if (gx.dtype() == DType::bf16) {
    launch_units<__nv_bfloat16, false>(p, plan, stream);
  } else {
    launch_units<__half, false>(p, plan, stream);
  }
  TS_CUDA_LAUNCH_CHECK("lstm_recurrence");
}

void recurrence_backward(const Tensor& dy, const Tensor& dhT, const Tensor& dcT, const Tensor& gates,
                         const Tensor& cells, const Tensor& c0, const Tensor& wh, const LayoutPtr& layout,
                         const Tensor& dpre, const Tensor& dh0, const Tensor& dc0) {
  const int device = dy.device().index;
  const int64_t steps = dy.size(0), batch = dy.size(1), hidden = dy.size(2);
  const RecurrencePlan plan = plan_recurrence(device, dy.dtype(), batch, hidden, layout, true);
  require_fits(plan, "lstm_recurrence_backward");
  // the backward on wgmma (dense, or block-sparse) where wanted (wgmma_wanted) and where it fits
  // (its TMA maps need dpre and W_h at 16-byte addresses, its pairs 4-byte ones)
  if (wgmma_wanted() && aligned16(dpre) && aligned16(wh) &&
      pairs_aligned({&dy, &dcT, &c0, &dh0, &dc0})) {
    const bool first = wgmma_streamed_first();  // the W-streamed kernels before the resident ones
    if (first && wgmma_streamed_backward_unfit(device, dy.dtype(), batch, hidden, layout).empty())
      return wgmma_streamed_backward(dy, dhT, dcT, gates, cells, c0, wh, dpre, dh0, dc0);
    if (const int cluster = wgmma_cluster(device, dy.dtype(), batch, hidden, layout, true); cluster > 0)
      return wgmma_backward(cluster, dy, dhT, dcT, gates, cells, c0, wh, dpre, dh0, dc0);
    if (!first && wgmma_streamed_backward_unfit(device, dy.dtype(), batch, hidden, layout).empty())
      return wgmma_streamed_backward(dy, dhT, dcT, gates, cells, c0, wh, dpre, dh0, dc0);
    if (layout && wgmma_sparse_backward_unfit(device, dy.dtype(), batch, hidden, layout).empty())
      return wgmma_sparse_backward(dy, dhT, dcT, gates, cells, c0, wh, layout, dpre, dh0, dc0);
  }
  Params p = base_params(wh, layout, plan, steps, batch, hidden);
  p.dy = dy.data_ptr();
  p.dh_last = dhT.data_ptr();
  p.dc_last = dcT.data_ptr();
  p.gates = static_cast<float*>(gates.data_ptr());
  p.cells = static_cast<float*>(cells.data_ptr());
  p.c0 = c0.data_ptr();
  p.dpre = dpre.data_ptr();
  p.dh0 = dh0.data_ptr();
  p.dc0 = dc0.data_ptr();
  const cudaStream_t stream = current_stream(dpre);
  const int n = plan.cluster * plan.units;  // the product's columns
  Counter counter(device, stream, p.n_items, n, image_bytes(plan, n));
  p.counter = counter.ptr_;
  p.flags = counter.flags();
  p.partials = counter.partials();
  p.img = counter.image();
  if (dy.dtype() == DType::bf16) {
    launch_units<__nv_bfloat16, true>(p, plan, stream);
  } else {
    launch_units<__half, true>(p, plan, stream);
  }
  TS_CUDA_LAUNCH_CHECK("lstm_recurrence_backward");
}

int launch_step_floor(int device, int64_t steps, bool exchange, int cluster) {
  const RecurrenceDevice lim = recurrence_device(device);
  TS_CHECK(lim.smem > 0, NotImplementedError, "the device does not support cooperative launches");
  TS_CHECK(cluster == 1 || cluster == 2 || cluster == 4 || cluster == 8, ValueError,
           "step floor: clusters of 1, 2, 4 or 8 blocks, not " << cluster);
  const cudaStream_t stream = static_cast<cudaStream_t>(cuda::stream(device));
  int grid = lim.sms;
  if (cluster > 1) {
    // as many whole clusters as the GPU holds at once (its SMs are split into GPCs of unequal size)
    const int clusters = max_active_clusters(step_floor_kernel, cluster, 0);
    TS_CHECK(clusters > 0, NotImplementedError,
             "step floor: no cluster of " << cluster
                                          << " blocks fits, or this build has no code for compute capability 9.0");
    grid = std::min(clusters, lim.sms / cluster) * cluster;
  }
  const size_t bytes = 2 * static_cast<size_t>(grid) * sizeof(uint4);
  void* slots = allocate(bytes, device);
  TS_CUDA_CHECK(cudaMemsetAsync(slots, 0, bytes, stream));
  Counter counter(device, stream);
  try {
    launch_cooperative(step_floor_kernel, grid, 0, stream, cluster, static_cast<int>(steps), exchange, cluster > 1,
                       static_cast<uint4*>(slots), counter.ptr_);
  } catch (...) {
    (void)cudaGetLastError();  // a refused launch leaves no error behind for the next launch's check
    deallocate(slots, bytes, device);
    throw;
  }
  TS_CUDA_LAUNCH_CHECK("lstm step floor");
  deallocate(slots, bytes, device);
  return grid;
}

#ifndef TESSERA_HAVE_SM90A
int wgmma_step_floor(const Tensor&, const Tensor&, int64_t, bool, int) {
  const bool built = false;
  TS_CHECK(built, NotImplementedError, "wgmma step floor: this build has no code for compute capability 9.0 (sm_90a)");
  return 0;
}

bool wgmma_wanted() { return false; }
std::string wgmma_forward_unfit(int, DType, int64_t, int64_t, const LayoutPtr&) {
  return "this build has no code for compute capability 9.0 (sm_90a)";
}
int wgmma_cluster(int, DType, int64_t, int64_t, const LayoutPtr&, bool) { return 0; }
void wgmma_forward(int, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, double,
                   const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  const bool built = false;
  TS_CHECK(built, NotImplementedError, "lstm_recurrence (wgmma): this build has no code for sm_90a");
}
void wgmma_backward(int, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                    const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  const bool built = false;
  TS_CHECK(built, NotImplementedError, "lstm_recurrence_backward (wgmma): this build has no code for sm_90a");
}
uint64_t wgmma_forward_launch_count() { return 0; }
uint64_t wgmma_backward_launch_count() { return 0; }
bool wgmma_streamed_first() { return false; }
std::string wgmma_streamed_forward_unfit(int, DType, int64_t, int64_t, const LayoutPtr&) {
  return "this build has no code for compute capability 9.0 (sm_90a)";
}
void wgmma_streamed_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, double,
                            const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  const bool built = false;
  TS_CHECK(built, NotImplementedError, "lstm_recurrence (wgmma, W streamed): this build has no code for sm_90a");
}
uint64_t wgmma_streamed_forward_launch_count() { return 0; }
std::string wgmma_streamed_backward_unfit(int, DType, int64_t, int64_t, const LayoutPtr&) {
  return "this build has no code for compute capability 9.0 (sm_90a)";
}
void wgmma_streamed_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  const bool built = false;
  TS_CHECK(built, NotImplementedError,
           "lstm_recurrence_backward (wgmma, W streamed): this build has no code for sm_90a");
}
uint64_t wgmma_streamed_backward_launch_count() { return 0; }
std::string wgmma_sparse_forward_unfit(int, DType, int64_t, int64_t, const LayoutPtr&) {
  return "this build has no code for compute capability 9.0 (sm_90a)";
}
void wgmma_sparse_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const LayoutPtr&,
                          double, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  const bool built = false;
  TS_CHECK(built, NotImplementedError, "lstm_recurrence (wgmma, block-sparse): this build has no code for sm_90a");
}
uint64_t wgmma_sparse_forward_launch_count() { return 0; }
uint64_t wgmma_sparse_streamed_forward_launch_count() { return 0; }
uint64_t wgmma_sparse_streamed_backward_launch_count() { return 0; }
std::string wgmma_sparse_backward_unfit(int, DType, int64_t, int64_t, const LayoutPtr&) {
  return "this build has no code for compute capability 9.0 (sm_90a)";
}
void wgmma_sparse_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const LayoutPtr&, const Tensor&, const Tensor&, const Tensor&) {
  const bool built = false;
  TS_CHECK(built, NotImplementedError,
           "lstm_recurrence_backward (wgmma, block-sparse): this build has no code for sm_90a");
}
uint64_t wgmma_sparse_backward_launch_count() { return 0; }
uint64_t wgmma_sparse_paired_launch_count() { return 0; }
uint64_t wgmma_sparse_backward_gate_box_launch_count() { return 0; }
#endif

}  // namespace cuda
}  // namespace tessera
