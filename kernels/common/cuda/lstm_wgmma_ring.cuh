// What the LSTM recurrence kernels on wgmma share (lstm_wgmma_forward.cu, lstm_wgmma_backward.cu,
// lstm_wgmma_sparse_*.cu and the issue-16 lab lstm_wgmma_floor.cu; sm_90a, include from .cu files
// only): their launch configuration and residency counts, the split grid barrier's wait and proxy
// fence, the cluster's meeting, rank, remote arrival and multicast copies, and one step's product
// over a ring of TMA-filled operand boxes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "core/cuda/check.cuh"
#include "core/dtype.h"
#include "core/sparse/block_layout.h"
#include "kernels/common/cuda/bsmm_sm90_common.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/lstm_gate_math.cuh"  // lstm_step_grads, for the backward kernels
#include "kernels/common/cuda/wgmma_sm90.cuh"

namespace tessera {
namespace cuda {
namespace sm90 {

constexpr int kWgmmaRing = 8;            // operand stages
constexpr int kWgmmaABox = 64 * 64 * 2;  // an operand box [64 rows, 64 K] of 2-byte elements

/// The dynamic shared memory of either recurrence kernel at hidden H (lstm_wgmma_forward.cu,
/// lstm_wgmma_backward.cu): W's slice (forward [32, H], backward [8, 4H]: 64·H bytes either way),
/// the ring, the barriers and the 1024-byte alignment.
inline size_t wgmma_smem_bytes(int64_t hidden) {
  return static_cast<size_t>(hidden) * 64 + kWgmmaRing * kWgmmaABox + 2048;
}
/// How many blocks of each kernel can be resident at once in clusters of `cluster` (0 where the
/// build has no sm_90a code for it).
int forward_resident_blocks(int device, DType dtype, int64_t hidden, int cluster);
int backward_resident_blocks(int device, DType dtype, int64_t hidden, int cluster);

/// The launch configuration of `grid` blocks of `threads` with `smem` bytes of dynamic shared
/// memory on `stream`, in clusters of `cluster` (attrs: room for two attributes), cooperative or not.
inline cudaLaunchConfig_t wgmma_launch_config(int grid, int threads, size_t smem, cudaStream_t stream, int cluster,
                                              bool cooperative, cudaLaunchAttribute (&attrs)[2]) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  attrs[0] = {};
  attrs[1] = {};
  int n = 0;
  if (cooperative) {  // every block resident at once: a wait for the grid's arrivals ends
    attrs[n].id = cudaLaunchAttributeCooperative;
    attrs[n++].val.cooperative = 1;
  }
  if (cluster > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = static_cast<unsigned>(cluster);
    attrs[n].val.clusterDim.y = 1;
    attrs[n++].val.clusterDim.z = 1;
  }
  cfg.attrs = attrs;
  cfg.numAttrs = static_cast<unsigned>(n);
  return cfg;
}

/// `ask`'s answer for (kernel, device, threads, smem, cluster), asked once per process: the
/// residency queries below take several driver calls, and every recurrence call wants them.
int remembered_residency(const void* kernel, int device, int threads, size_t smem, int cluster,
                         const std::function<int()>& ask);

/// How many blocks of `kernel` (`threads` each, `smem` bytes) can be resident at once in clusters
/// of `cluster`; 0 where its binary was not built for compute capability 9.0.
template <class... Args>
int resident_blocks(void (*kernel)(Args...), int device, int threads, size_t smem, int cluster) {
  return remembered_residency(reinterpret_cast<const void*>(kernel), device, threads, smem, cluster, [&] {
    cudaFuncAttributes fa = {};
    TS_CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
    if (fa.binaryVersion < 90) return 0;
    TS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    if (cluster == 1) {
      int per_sm = 0, sms = 0;
      TS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
      TS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
      return per_sm * sms;
    }
    cudaLaunchAttribute attrs[2];
    const cudaLaunchConfig_t cfg = wgmma_launch_config(cluster, threads, smem, nullptr, cluster, false, attrs);
    int clusters = 0;
    TS_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
    return clusters * cluster;
  });
}

/// How a block-sparse recurrence kernel (lstm_wgmma_sparse_*.cu) lays its `units` work units
/// (groups of 32 units, or block rows) over the grid: one a block, or where those cannot all be
/// resident at once, two neighbours a block (one per consumer warpgroup, as at H 8192 on 132 SMs);
/// each with its shared memory. per_block 0 where neither fits, `why` saying so.
/// TESSERA_LSTM_SPARSE_PAIRS: auto (the default) pairs the work units only where one a block cannot
/// all be resident (the sparse H 8192 layers at 1/64: 19.3 -> 11.0 ms on the H100); 1 pairs them
/// wherever the pairs fit (lab timings, and the pairs' tests at small H); 0 never; anything else a
/// ValueError that names it.
enum class SparsePairs { where_needed, wherever_they_fit, never };
SparsePairs sparse_pairs_choice();
/// TESSERA_LSTM_SPARSE_STREAMED (the block-sparse kernels' streamed forms, two work units a block,
/// each unit's first W tiles or blocks resident and the rest copied beside their operand boxes):
/// unset or 1 (the default) where neither one unit nor two a block fit (sparse H 8192 at 1/16: 32.5
/// -> 22.0 ms on the H100); 0 off; 1:N before the other forms, at most N tiles (forward) or blocks
/// (backward) of a unit resident (the tests stream most of W at small H); anything else a
/// ValueError. cap -1: off.
struct SparseStreamed {
  int cap = -1;
  bool first = false;
};
SparseStreamed sparse_streamed_choice();
/// Counts a launch of a kernel with two work units a block (wgmma_sparse_paired_launch_count).
void count_sparse_paired_launch();

/// TESSERA_LSTM_SPARSE_GATE_BOXES: 1 (the default) gives the block-sparse backward under nn::LSTM's
/// gate layout one operand copy per mask entry for its four gates, with one block row a block
/// (lstm_wgmma_sparse_backward.cu; H 4096 at 1/16 on the H100: 11.8 -> 7.8 µs a step), with two
/// (H 8192 at 1/64: 15.06 -> 14.36 µs a step) and in the streamed form, the entry's four W blocks
/// beside its four boxes (H 8192 at 1/16: 33.5 -> 32.3 µs a step); 0 one copy a block; anything
/// else a ValueError.
bool sparse_gate_boxes_wanted();

/// A block-sparse kernel's threads: `per_block` consumer warpgroups and the producer warp.
constexpr int sparse_block_threads(int per_block) { return 128 * per_block + 32; }

/// The dynamic shared memory one block may have on `device` (its opt-in limit).
inline size_t smem_optin(int device) {
  int optin = 0;
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return static_cast<size_t>(optin);
}

/// How many copy units (`unit_bytes` of W each) of each of its two work units a block-sparse kernel's
/// streamed form keeps resident beside `fixed_bytes` of other shared memory (its ring, barriers and
/// tables): as many as fit, at most `cap` and `most` (the busiest work unit's count).
inline int streamed_resident_units(int device, size_t fixed_bytes, int unit_bytes, int cap, int most) {
  const int64_t room = static_cast<int64_t>(smem_optin(device)) - static_cast<int64_t>(fixed_bytes);
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>({room / (2 * unit_bytes), cap, most})));
}

/// The sparse backward's streamed forms' order within a block row's list of `count` copy units,
/// `resident` of which fit: the first count − resident are streamed (copied beside their operand
/// boxes every phase), the last ones resident, so that a phase starts with streamed units, whose W
/// copies the producer can issue before the grid barrier (they do not depend on the phase's operand).
/// Returns how many are streamed. (H 8192 1/16, H100, 2026-12-07, both rounds of one call: backward
/// 27.8 -> 26.6 µs a step, graph 16.9-17.0 -> 16.7-16.8 ms; the forward, the same way round, went
/// from 18.4 to 18.9 and keeps its streamed entries last.)
__host__ __device__ __forceinline__ int streamed_entries(int count, int resident) {
  return count > resident ? count - resident : 0;
}

/// Whether `blocks` blocks of `kernel` (`threads` each, `smem` bytes of dynamic shared memory, within
/// the per-block limit) can all be resident at once (a cooperative launch of them can run).
template <class K>
bool all_resident(K kernel, int device, int threads, size_t smem, int64_t blocks) {
  return smem <= smem_optin(device) && resident_blocks(kernel, device, threads, smem, 1) >= blocks;
}

struct SparseGrid {
  int per_block = 0;
  size_t smem = 0;
  const char* why = "";
};
template <class K1, class K2>
SparseGrid sparse_grid(int device, int units, K1 one_kernel, size_t one_smem, K2 pair_kernel, size_t pair_smem,
                       const char* too_big, const char* not_resident) {
  if (one_smem > smem_optin(device)) return {0, one_smem, too_big};
  const SparsePairs pairs = sparse_pairs_choice();
  const bool forced = pairs == SparsePairs::wherever_they_fit;
  const bool ones_fit = all_resident(one_kernel, device, sparse_block_threads(1), one_smem, units);
  if (!forced && ones_fit) return {1, one_smem, ""};
  if (pairs != SparsePairs::never && units % 2 == 0 &&
      all_resident(pair_kernel, device, sparse_block_threads(2), pair_smem, units / 2))
    return {2, pair_smem, ""};
  if (ones_fit) return {1, one_smem, ""};  // (pairs asked for where they do not fit)
  return {0, one_smem, not_resident};
}

/// What the block-sparse kernels (lstm_wgmma_sparse_*.cu) read of a layout: whether it is
/// nn::LSTM's gate layout [H, 4H] (gate g's block column c + g·q lists the block rows of column c,
/// in the same order), its busiest block column's and block row's block counts, and the most blocks
/// two neighbouring block columns 2j, 2j + 1 of the first gate, or block rows 2j, 2j + 1, hold
/// together. Found once per layout object (an O(nnz) scan, and every recurrence call asks); the
/// cache holds layouts weakly, so a new layout at a reused address is scanned afresh.
struct SparseLayoutFacts {
  bool gate_layout = false;
  int max_col_blocks = 0;
  int max_row_blocks = 0;
  int max_pair_col_blocks = 0;
  int max_pair_row_blocks = 0;
};
SparseLayoutFacts sparse_layout_facts(const LayoutPtr& layout);

/// Orders this thread's generic-proxy global accesses with the async proxy's (TMA) ones: after
/// a block's generic stores that other blocks' TMA will read, and after the wait that sees them.
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

/// The split grid barrier's wait: until `counter` (the grid's arrivals) reaches `target`.
__device__ __forceinline__ void wait_count(const unsigned* counter, unsigned target) {
  unsigned seen;
  do {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
  } while (seen < target);
}

/// A block with nothing to multiply (a block-sparse group or block row with no blocks) reads no
/// operand, so no ring wait holds it to the grid's pace: its arrival for phase `phase` must wait for
/// every block's arrival for phase − 1, or it would count for a block still on that phase (the
/// producers' waits are on the count). Thread 0 makes the arrival (arrive_grid), so it waits.
__device__ __forceinline__ void keep_pace_if_idle(bool idle, const unsigned* counter, int phase) {
  if (idle && phase > 0 && threadIdx.x == 0) wait_count(counter, static_cast<unsigned>(phase) * gridDim.x);
}

// The cluster: every thread of every block arrives and waits (not .aligned: the producer warp's
// lanes reach it apart); this block's rank; an arrival on the mbarrier at the same shared-memory
// offset in block `rank` of the cluster (release at cluster scope: this warp's reads of the stage
// are done); a TMA copy of the box at (c0, c1) into the same offset of every block in `mask`,
// completing its bytes on each one's barrier at `bar`'s offset.
__device__ __forceinline__ void cluster_meet() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ int cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return static_cast<int>(r);
}
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, int rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_addr(bar)), "r"(rank));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                                      uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}

/// tma_load_2d_multicast for a 3-D map: the box at (c0 innermost, c1, c2).
__device__ __forceinline__ void tma_load_3d_multicast(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                                      int c2, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "h"(mask)
      : "memory");
}

/// Two consecutive elements of a 2-byte type (the accumulator layout gives a thread two adjacent
/// units), read or written as one 4-byte access: the offsets are even, and the host takes these
/// kernels only for 4-byte aligned data (lstm_persistent.cu's pairs_aligned). load_pair_raw keeps
/// them packed (one register, for reads issued early), unpack_pair makes floats of them.
template <class T>
struct PairOf;
template <>
struct PairOf<__nv_bfloat16> {
  using type = __nv_bfloat162;
};
template <>
struct PairOf<__half> {
  using type = __half2;
};
template <class T>
using Pair = typename PairOf<T>::type;

template <class T>
__device__ __forceinline__ Pair<T> load_pair_raw(const T* p) {
  return *reinterpret_cast<const Pair<T>*>(p);
}
template <class T>
__device__ __forceinline__ float2 unpack_pair(Pair<T> v) {
  return make_float2(to_acc(v.x), to_acc(v.y));
}
template <class T>
__device__ __forceinline__ float2 load_pair(const T* p) {
  return unpack_pair<T>(load_pair_raw(p));
}
template <class T>
__device__ __forceinline__ void store_pair(T* p, float a, float b) {
  Pair<T> v;
  v.x = from_acc<T>(a);
  v.y = from_acc<T>(b);
  *reinterpret_cast<Pair<T>*>(p) = v;
}

/// The consumers' half of the split grid barrier, after their generic stores of the step's output
/// (which other blocks read by TMA next step): the stores ordered before the async proxy's reads,
/// the consumer warpgroups (threads 0 … 128·kWarpgroups − 1) met, then thread 0's fence and the
/// block's arrival.
/// The block-sparse producers' walk over a block's kUnits work units (groups or block rows, one per
/// consumer warpgroup, block b holding units kUnits·b …): unit g's list entries are
/// [lead[g], lead[g] + kPer·count[g]) of the block's, which start at `first`, in `ptr` (the layout's
/// col_ptr or row_ptr); count[g] counts copies of kPer entries each (4: the gate boxes, one copy a
/// mask entry for its four gates). Returns the most copies of a unit.
template <int kUnits, int kPer = 1>
__device__ __forceinline__ int unit_lists(const int32_t* ptr, int first, int (&lead)[kUnits], int (&count)[kUnits]) {
  int most = 0;
#pragma unroll
  for (int g = 0; g < kUnits; ++g) {
    const int at = ptr[kUnits * blockIdx.x + g];
    lead[g] = at - first;
    count[g] = (ptr[kUnits * blockIdx.x + g + 1] - at) / kPer;
    most = max(most, count[g]);
  }
  return most;
}

template <int kWarpgroups = 1>
__device__ __forceinline__ void arrive_grid(unsigned* counter) {
  fence_proxy_async_global();
  named_barrier(1, 128 * kWarpgroups);
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1u);
  }
}

/// A consumer thread's two rows of the m64 tile (wgmma's accumulator layout: warp w, lane
/// 4·wq + q holds rows 16w + wq and 16w + wq + 8), and whether each is one of the batch's.
__device__ __forceinline__ void consumer_rows(int warp, int lane, int batch, int (&rows)[2], bool (&live)[2]) {
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    rows[hh] = 16 * warp + lane / 4 + 8 * hh;
    live[hh] = rows[hh] < batch;
  }
}

/// A consumer warp gives a ring stage back: an arrival on its empty barrier in this block, or in
/// every block of the cluster (whose producers may all write the stage by multicast).
template <int kCluster>
__device__ __forceinline__ void release_stage(uint64_t* bar) {
  if constexpr (kCluster == 1) {
    mbar_arrive(bar);
  } else {
#pragma unroll
    for (int r = 0; r < kCluster; ++r) mbar_arrive_cluster(bar, r);
  }
}

/// A block's shared memory: W's resident slice (w_bytes, a multiple of 1024) from the first
/// 1024-aligned byte, then the ring's kWgmmaRing operand boxes of box_bytes, then the full and
/// empty barriers of its stages and W's barrier.
struct RingSmem {
  uint8_t* w;
  uint8_t* ring;
  uint64_t* full;
  uint64_t* empty;
  uint64_t* w_bar;
};
__device__ __forceinline__ RingSmem carve_ring_smem(uint8_t* smem_raw, int w_bytes, int box_bytes = kWgmmaABox,
                                                    int stages = kWgmmaRing) {
  RingSmem m;
  m.w = align1024(smem_raw);
  m.ring = m.w + w_bytes;
  m.full = reinterpret_cast<uint64_t*>(m.ring + stages * box_bytes);
  m.empty = m.full + stages;
  m.w_bar = m.empty + stages;
  return m;
}

/// Thread 0 makes the ring's kStages barriers (full: the producer's one arrival plus the bytes;
/// empty: the cluster's kWarps·kCluster consumer warps, kWarps of each block reading every stage)
/// and W's; then the block, or with kCluster > 1 the whole cluster, meets, so that no peer's copy or
/// arrival reaches a barrier before it exists.
template <int kCluster, int kStages = kWgmmaRing, int kWarps = 4>
__device__ __forceinline__ void init_ring_barriers(uint64_t* full, uint64_t* empty, uint64_t* w_bar) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kWarps * kCluster);
    }
    mbar_init(w_bar, 1);
    fence_barrier_init();
  }
  if constexpr (kCluster > 1) {
    cluster_meet();
  } else {
    __syncthreads();
  }
}

/// One step's product of the consumer warpgroup: acc [64, N] (wgmma's accumulator layout) =
/// Σ over the step's `boxes` K boxes of the operand box in ring stage (n + k) mod kStages (a ring of
/// kStages: the block's, or with two consumer warpgroups on different boxes, this one's share)
/// ([64, kSlices·16] K-major, rows of kSlices·32 bytes swizzled as TMA wrote them, at
/// ring + stage·kStride) times W box k, whose k16 slice kk's descriptor is b_desc(k, kk) (and
/// kTransB its major-ness). Waits for each box's full barrier (phase by the box count n + k) and
/// gives each stage back once its products are done: lane 0 of each warp calls release(empty
/// barrier of the stage) (an arrival in this block, or in every block of a cluster). kStageBytes
/// (0: the box's size) spaces the stages where they hold more than the box (a streamed W tile).
template <class T, int N, int kSlices, int kTransB, int kStages = kWgmmaRing, int kStageBytes = 0, class BDesc,
          class Release>
__device__ __forceinline__ void ring_product_with(float (&acc)[N / 2], uint8_t* ring, uint64_t* full, uint64_t* empty,
                                                  int n, int boxes, int lane, BDesc b_desc, Release release) {
  constexpr int kRowBytes = kSlices * 32, kStride = kStageBytes > 0 ? kStageBytes : 64 * kRowBytes;
#pragma unroll
  for (int e = 0; e < N / 2; ++e) acc[e] = 0.f;
  if (boxes == 0) return;  // (a block-sparse group with no block rows)
  for (int k = 0; k < boxes; ++k) {
    const int s = (n + k) % kStages;
    mbar_wait(&full[s], ((n + k) / kStages) & 1);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kSlices; ++kk)
      Wgmma<T, N>::template run<0, kTransB>(
          acc, make_desc(ring + s * kStride + kk * 32, 16, 8 * kRowBytes, kRowBytes), b_desc(k, kk), true);
    wgmma_commit();
    if (k > 0) {  // box k − 1's products are done: its stage goes back to the producer(s)
      wgmma_wait<1>();
      fence_operands(acc);
      __syncwarp();
      if (lane == 0) release(&empty[(n + k - 1) % kStages]);
    }
  }
  wgmma_wait<0>();
  fence_operands(acc);
  __syncwarp();
  if (lane == 0) release(&empty[(n + boxes - 1) % kStages]);
}

/// One step's product over a ring of kStages stages of kStageBytes, each starting with an operand box
/// [64, 64] (128-byte swizzle) and holding, for W-streaming kernels, more beside it: acc [64, N] =
/// Σ over the step's `boxes` boxes k of stage (n + k) mod kStages's box times the K-major W box
/// [N, 64] (128-byte swizzle) at w_of(k, stage) (resident, or in the stage) transposed. The full /
/// empty protocol of ring_product_with (one block: each warp's lane 0 gives the stage back).
template <class T, int N, int kStages, int kStageBytes, class WOf>
__device__ __forceinline__ void ring_product_staged(float (&acc)[N / 2], uint8_t* ring, uint64_t* full,
                                                    uint64_t* empty, int n, int boxes, int lane, WOf w_of) {
#pragma unroll
  for (int e = 0; e < N / 2; ++e) acc[e] = 0.f;
  if (boxes == 0) return;
  for (int k = 0; k < boxes; ++k) {
    const int s = (n + k) % kStages;
    uint8_t* stage = ring + s * kStageBytes;
    const uint8_t* w = w_of(k, stage);
    mbar_wait(&full[s], ((n + k) / kStages) & 1);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      Wgmma<T, N>::template run<0, 0>(acc, make_desc(stage + kk * 32, 16, 1024, 128),
                                      make_desc(w + kk * 32, 16, 1024, 128), true);
    wgmma_commit();
    if (k > 0) {  // box k − 1's products are done: its stage goes back to the producer
      wgmma_wait<1>();
      fence_operands(acc);
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[(n + k - 1) % kStages]);
    }
  }
  wgmma_wait<0>();
  fence_operands(acc);
  __syncwarp();
  if (lane == 0) mbar_arrive(&empty[(n + boxes - 1) % kStages]);
}

/// ring_product_with for [64, 64] operand boxes (128-byte swizzle) and W resident as K-major boxes
/// [N, 64] (the same swizzle) at w_s + k·N·128.
template <class T, int N, class Release>
__device__ __forceinline__ void ring_product(float (&acc)[N / 2], uint8_t* ring, uint8_t* w_s, uint64_t* full,
                                             uint64_t* empty, int n, int boxes, int lane, Release release) {
  constexpr int kWBox = N * 64 * 2;
  ring_product_with<T, N, 4, 0>(
      acc, ring, full, empty, n, boxes, lane,
      [w_s](int k, int kk) { return make_desc(w_s + k * kWBox + kk * 32, 16, 1024, 128); }, release);
}

}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
