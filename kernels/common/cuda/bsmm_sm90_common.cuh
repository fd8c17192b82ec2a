// What the sm_90a block-sparse matmul kernels (bsmm_sm90_gather.cu, bsmm_sm90_gradient.cu)
// share on the host and the device: tensor maps, the persistent grid size, dtype dispatch,
// support checks. Internal to those two files (everything here is in an unnamed namespace).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "core/error.h"
#include "kernels/common/cuda/bsmm_store.cuh"
#include "kernels/common/env_switch.h"  // env_switch: the kernels' lab switches
#include "kernels/common/cuda/bsmm_tc.h"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/layout_tables.h"
#include "kernels/common/cuda/wgmma_sm90.cuh"

namespace tessera {
namespace cuda {
namespace sm90 {

/// Launches of the sm_90a kernels so far (bsmm_sm90_gather.cu).
extern std::atomic<uint64_t> g_launches;
/// Launches in convolution mode (bsmm_sm90_gather.cu; the dW kernel's too), also in g_launches.
extern std::atomic<uint64_t> g_conv_launches;
/// Launches of the halo kernel (bsconv_sm90_halo.cu), also in g_launches and g_conv_launches.
extern std::atomic<uint64_t> g_halo_launches;

namespace {

constexpr int kThreads = 384;  // dW: producer warpgroup + two consumer warpgroups
constexpr int kConsumerWarps = 8;

__device__ __forceinline__ uint8_t* align1024(uint8_t* p) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + 1023) & ~uintptr_t{1023});
}

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    TS_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    TS_CHECK(q == cudaDriverEntryPointSuccess && f, DeviceError,
             "bsmm: the CUDA driver has no cuTensorMapEncodeTiled (TMA)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

/// A row-major tensor map of `rank` dimensions (bf16, f16 or f32; dims and box innermost first),
/// swizzled by the box's row length (128, 64 or 32 bytes; 16: not swizzled). What a box reads
/// outside the tensor is zeros; what a store writes there is dropped.
CUtensorMap encode_map(const void* base, DType dt, int rank, const uint64_t* dims, const uint32_t* box) {
  CUtensorMap map;
  const uint64_t elem = dt == DType::f32 ? 4 : 2;
  cuuint64_t d[5], strides[4];
  cuuint32_t b[5], element_strides[5];
  uint64_t stride = elem;
  for (int i = 0; i < rank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    element_strides[i] = 1;
    if (i > 0) strides[i - 1] = stride;
    stride *= dims[i];
  }
  const CUtensorMapDataType type = dt == DType::f32    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : dt == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const uint64_t row_bytes = box[0] * elem;
  const CUresult r = encode_tiled()(
      &map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), d, strides, b, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE,
      row_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
      : row_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
      : row_bytes == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                        : CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TS_CHECK(r == CUDA_SUCCESS, DeviceError,
           "bsmm: cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << ") for a " << rank
                                                   << "-D tensor of inner size " << dims[0]);
  return map;
}

/// A 2-D row-major [rows, cols] tensor map with boxes of [box_rows, box_cols].
CUtensorMap tensor_map(const void* base, DType dt, uint64_t rows, uint64_t cols, uint32_t box_rows, uint32_t box_cols) {
  const uint64_t dims[2] = {cols, rows};
  const uint32_t box[2] = {box_cols, box_rows};
  return encode_map(base, dt, 2, dims, box);
}

/// A 5-D tensor map over channels-last activations [N, s0, s1, s2, channels] given as (channels,
/// ext innermost spatial first, batch last: conv_tiles.h's axes), with boxes of (box_cols, box).
CUtensorMap conv_map(const void* base, DType dt, uint64_t channels, const int32_t (&ext)[4], uint32_t box_cols,
                     const int32_t (&box)[4]) {
  const uint64_t dims[5] = {channels, static_cast<uint64_t>(ext[0]), static_cast<uint64_t>(ext[1]),
                            static_cast<uint64_t>(ext[2]), static_cast<uint64_t>(ext[3])};
  const uint32_t b[5] = {box_cols, static_cast<uint32_t>(box[0]), static_cast<uint32_t>(box[1]),
                         static_cast<uint32_t>(box[2]), static_cast<uint32_t>(box[3])};
  return encode_map(base, dt, 5, dims, b);
}


/// Thread blocks of `kernel` that fit on one multiprocessor, times the multiprocessors, for
/// `smem_bytes` of dynamic shared memory (it sets the kernel's limit): asked again only when the
/// size differs from the last call's (the halo kernels' sizes depend on the call).
template <auto Kernel>
int persistent_grid(int smem_bytes, int threads = kThreads) {
  static std::atomic<int64_t> cached{0};  // (smem_bytes << 32) | grid
  const int64_t c = cached.load(std::memory_order_relaxed);
  if (c > 0 && (c >> 32) == smem_bytes) return static_cast<int>(c & 0xffffffff);
  int device = 0, sms = 0, per_sm = 0;
  TS_CUDA_CHECK(cudaGetDevice(&device));
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  TS_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  TS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel, threads, smem_bytes));
  const int grid = sms * (per_sm > 0 ? per_sm : 1);
  cached.store((static_cast<int64_t>(smem_bytes) << 32) | grid, std::memory_order_relaxed);
  return grid;
}

/// Thread 0's set-up of `n` full/empty barrier pairs (pipeline stages, work-item ring slots): full
/// completes on the producer's one arrival (and its copies' bytes), empty on one arrival per
/// consumer warp. fence_barrier_init() after the last pair.
__device__ __forceinline__ void init_barrier_pairs(uint64_t* full, uint64_t* empty, int n, int consumer_warps) {
  for (int s = 0; s < n; ++s) {
    mbar_init(&full[s], 1);
    mbar_init(&empty[s], consumer_warps);
  }
}

/// The dW kernels' barriers after their `stages` stages of `stage_bytes` at `smem`: the stages'
/// full/empty pairs (room for max_stages of them), the item ring's pairs and its kRing slots (first
/// entry, count, part, column; count 0: no more items), made by thread 0 for `consumer_warps`
/// consumer warps and published to the block (a block barrier: every thread calls it). The halo dW
/// kernels (bsconv_sm90_dw_halo.cu, bsconv_sm90_dw_strip.cu) fit their stage count at run time.
struct DwSync {
  uint64_t *full, *empty, *item_full, *item_empty;
  int4* ring;
};
template <int kRing>
__device__ __forceinline__ DwSync dw_sync(uint8_t* smem, int stage_bytes, int stages, int max_stages,
                                          int consumer_warps) {
  DwSync d;
  d.full = reinterpret_cast<uint64_t*>(smem + stages * stage_bytes);
  d.empty = d.full + max_stages;
  d.item_full = d.empty + max_stages;
  d.item_empty = d.item_full + kRing;
  d.ring = reinterpret_cast<int4*>(d.item_empty + kRing);
  if (threadIdx.x == 0) {
    init_barrier_pairs(d.full, d.empty, stages, consumer_warps);
    init_barrier_pairs(d.item_full, d.item_empty, kRing, consumer_warps);
    fence_barrier_init();
  }
  __syncthreads();
  return d;
}
/// The same for kStages stages fixed at compile time and kConsumerWarps consumers (bsmm_sm90_gradient.cu,
/// bsmm_sm90_gate_gradient.cu).
template <int kStages, int kRing>
__device__ __forceinline__ DwSync dw_sync(uint8_t* smem, int stage_bytes) {
  return dw_sync<kRing>(smem, stage_bytes, kStages, kStages, kConsumerWarps);
}


bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool half_dtype(DType dt) { return dt == DType::bf16 || dt == DType::f16; }

template <class F>
void dispatch_types(DType in, DType out, F&& f) {
  auto with_out = [&](auto tin) {
    if (out == DType::f32) return f(tin, TypeTag<float>{});
    return f(tin, tin);
  };
  if (in == DType::bf16) return with_out(TypeTag<__nv_bfloat16>{});
  return with_out(TypeTag<__half>{});
}


/// A consumer warp's n-th work item from the producer's ring of kRing (mbarriers item_full /
/// item_empty, one arrival per consumer warp): waits for it, reads it and frees its slot.
template <int kRing>
__device__ __forceinline__ int4 receive_item(int n, uint64_t* item_full, uint64_t* item_empty, const int4* ring,
                                             int lane) {
  const int slot = n % kRing;
  mbar_wait(&item_full[slot], (n / kRing) & 1);
  const int4 w = ring[slot];
  __syncwarp();
  if (lane == 0) mbar_arrive(&item_empty[slot]);
  return w;
}

/// The dW kernels' producer warp: its n-th work item (run item % runs, part item / runs: the
/// first by blockIdx.x, then from the layout's counter, `taken` carrying the next), handed to the
/// consumers through the ring and returned as (first entry, count, part, block column); count 0
/// past the last item, when the last thread block to get there sets the counter back to 0.
template <int kRing>
__device__ __forceinline__ int4 next_run_item(const BlockGradient& p, int items, int n, int& taken, int lane,
                                              uint64_t* item_full, uint64_t* item_empty, int4* ring) {
  const int item = __shfl_sync(0xffffffffu, taken, 0);
  int4 w = make_int4(0, 0, 0, 0);
  if (item < items) {
    const int run = item % p.col_runs;
    w = make_int4(p.col_run[3 * run], p.col_run[3 * run + 1], item / p.col_runs, p.col_run[3 * run + 2]);
    if (lane == 0) taken = static_cast<int>(gridDim.x) + atomicAdd(p.counter, 1);
  }
  if (lane == 0) {
    const int slot = n % kRing;
    mbar_wait(&item_empty[slot], ((n / kRing) & 1) ^ 1);
    ring[slot] = w;
    mbar_arrive(&item_full[slot]);
  }
  // Every item is taken once each thread block took one past the end: the last of them resets the counter.
  if (w.y == 0 && lane == 0 && atomicAdd(p.counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
    p.counter[0] = 0;
    p.counter[1] = 0;
  }
  return w;
}

/// Writes a consumer warpgroup's accumulators acc[kMTiles][kBN / 2] (wgmma's m64nkBN layout per
/// m64 tile) into its staging `mine`: boxes of kOutCols columns side by side (kOutBoxBytes apart),
/// rows of kOutCols·sizeof(TO) bytes, swizzled as the TMA store that writes each box out reads it.
/// Row r (0..15) of the warp's part of m64 tile mi goes to staging row row_of(mi, r) (the halo
/// kernel's strip form: its own order; stage_tile: mi·64 + warp·16 + r).
template <class TO, int kMTiles, int kBN, int kOutCols, class RowOf>
__device__ __forceinline__ void stage_tile_rows(uint8_t* mine, const float (&acc)[kMTiles][kBN / 2], int lane,
                                                RowOf&& row_of) {
  constexpr int kOutRowBytes = kOutCols * static_cast<int>(sizeof(TO));
  constexpr int kOutBoxBytes = 64 * kMTiles * kOutRowBytes;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row_of(mi, g + 8 * h), col = 8 * j + 2 * t;
        const int box = col / kOutCols, bc = col % kOutCols;
        const int byte = row * kOutRowBytes + bc * static_cast<int>(sizeof(TO));
        const int swizzled = byte ^ (((byte >> 7) & (kOutRowBytes / 16 - 1)) << 4);
        store_pair(reinterpret_cast<TO*>(mine + box * kOutBoxBytes + swizzled), acc[mi][4 * j + 2 * h],
                   acc[mi][4 * j + 2 * h + 1], false);
      }
}
template <class TO, int kMTiles, int kBN, int kOutCols>
__device__ __forceinline__ void stage_tile(uint8_t* mine, const float (&acc)[kMTiles][kBN / 2], int warp, int lane) {
  stage_tile_rows<TO, kMTiles, kBN, kOutCols>(mine, acc, lane, [&](int mi, int r) { return mi * 64 + warp * 16 + r; });
}

/// Calls f(bs, transpose_w, warpgroups, m64 tiles) with the gather kernels' tile for p (each an
/// integral_constant): rows per tile by N, 256 (two consumer warpgroups of two m64 tiles sharing
/// each weight block: on the H200 1.35-1.7x faster than 128 with the TMA-store epilogue, bs 32
/// and 64, densities 0.1-1) when N passes 128; 128 when N passes 64; else 64 (one consumer
/// warpgroup: an LSTM step's batch; 2x faster there than 256-row items of mostly padding).
template <class F>
void with_gather_tile(const GatherProduct& p, F&& f) {
  using I1 = std::integral_constant<int, 1>;
  using I2 = std::integral_constant<int, 2>;
  auto with_rows = [&](auto bs, auto trans) {
    if (p.n > 128) return f(bs, trans, I2{}, I2{});
    if (p.n > 64) return f(bs, trans, I2{}, I1{});
    return f(bs, trans, I1{}, I1{});
  };
  auto with_bs = [&](auto trans) {
    if (p.bs == 64) return with_rows(std::integral_constant<int, 64>{}, trans);
    if (p.bs == 32) return with_rows(std::integral_constant<int, 32>{}, trans);
    return with_rows(std::integral_constant<int, 16>{}, trans);
  };
  if (p.transpose_w) return with_bs(std::true_type{});
  return with_bs(std::false_type{});
}

bool device_ok(int device) {
  int major = 0, minor = 0;
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}


/// dw[e] (+)= partial[0][e] + partial[1][e] + ... (in that order; part q at partial + q·part_stride)
/// for e < elems, four elements per thread.
template <class TO>
__global__ void sum_parts_kernel(const float* __restrict__ partial, TO* __restrict__ dw, int64_t elems, int parts,
                                 int64_t part_stride, bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * 4;
  for (int64_t e = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4; e < elems; e += stride) {
    float4 s = *reinterpret_cast<const float4*>(partial + e);
    for (int q = 1; q < parts; ++q) {
      const float4 v = *reinterpret_cast<const float4*>(partial + q * part_stride + e);
      s.x += v.x;
      s.y += v.y;
      s.z += v.z;
      s.w += v.w;
    }
    store_pair(dw + e, s.x, s.y, accumulate);
    store_pair(dw + e + 2, s.z, s.w, accumulate);
  }
}

}  // namespace
}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
