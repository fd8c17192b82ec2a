// What the two halo dW kernels (bsconv_sm90_dw_halo.cu and its strip form, bsconv_sm90_dw_strip.cu)
// share: the producer warp's copies, the store of a row of dw, and the parts of the tiles with their sum.
// Internal to those files (unnamed namespace, as bsmm_sm90_common.cuh).
#pragma once

#include <algorithm>
#include <cstdlib>

#include "core/tensor.h"
#include "kernels/common/cuda/bsmm_sm90_common.cuh"
#include "kernels/common/ring_cursor.h"

namespace tessera {
namespace cuda {
namespace sm90 {
namespace {

constexpr int kDwSmemLimit = 227 * 1024;  // a thread block's dynamic shared memory
constexpr int kDwMaxStages = 8;           // the barrier pairs' count (the stages that fit, at most)
constexpr int kDwBarrierBytes = 1024;     // the stages' and the item ring's barriers, the ring's slots

/// A halo dW kernel's shared memory: stages of the dY box (dy_bytes) and `slots` halo boxes of halo_bytes
/// (rows of row_bytes, rounded up to 1024: the swizzle repeats every 1024 bytes), as many as fit up to
/// kDwMaxStages, then the barriers; fits: two stages at least.
struct DwHaloSmem {
  int halo_bytes, slots, stage_bytes, stages, total;
  bool fits() const { return stages >= 2 && total <= kDwSmemLimit; }
};
inline DwHaloSmem dw_halo_layout(const ConvTiles& ct, int row_bytes, int dy_bytes, int slots) {
  DwHaloSmem m{};
  m.halo_bytes = (ct.halo_rows() * row_bytes + 1023) / 1024 * 1024;
  m.slots = slots;
  m.stage_bytes = dy_bytes + slots * m.halo_bytes;
  m.stages = std::min(kDwMaxStages, (kDwSmemLimit - 1024 - kDwBarrierBytes) / m.stage_bytes);
  m.total = m.stages * m.stage_bytes + kDwBarrierBytes + 1024;  // + the alignment of the start
  return m;
}

/// The producer warp of a halo dW kernel (every lane calls it): takes the work items (run, part), hands
/// them to the consumers through the item ring, and per tile of the part claims a stage and copies into it
/// the dY box of the run's column (at dy_box(stage), kDyBytes) and, from lane b < the run's blocks, block
/// b's halo box of x (at halo(stage, b)). A run is entries q = list position · taps + tap, so its blocks
/// are list positions w.x / taps .. (w.x + w.y − 1) / taps.
template <int kRing, int BS, int kDyBytes, class DyBox, class Halo>
__device__ __forceinline__ void produce_dw_halo(const CUtensorMap& map_x, const CUtensorMap& map_dy,
                                                const BlockGradient& p, const ConvTiles& ct, int items, int part_steps,
                                                int stages, const DwSync& sync, DyBox&& dy_box, Halo&& halo) {
  constexpr int kRowBytes = 2 * BS;
  const int lane = threadIdx.x % 32, taps = ct.taps, steps = ct.total_tiles;
  if (lane == 0) {
    prefetch_tma_map(&map_x);
    prefetch_tma_map(&map_dy);
  }
  RingCursor stage;
  int taken = blockIdx.x;
  for (int n = 0;; ++n) {
    const int4 w = next_run_item<kRing>(p, items, n, taken, lane, sync.item_full, sync.item_empty, sync.ring);
    if (w.y == 0) break;
    const int first_block = w.x / taps, blocks = (w.x + w.y - 1) / taps - first_block + 1;
    const int row = lane < blocks ? p.col_rows[first_block + lane] : 0;  // the block row of lane's block
    const uint32_t tx = static_cast<uint32_t>(kDyBytes + blocks * ct.halo_rows() * kRowBytes);
    const int first = w.z * part_steps, last = min(steps, first + part_steps);
    int32_t origin[ConvTiles::kAxes];  // the tile's, walked from tile to tile without division
    ct.origin(first, origin);
    for (int step = first; step < last; ++step, stage.next(stages), ct.next_origin(origin)) {
      const int s = stage.slot;
      if (lane == 0) {
        mbar_wait(&sync.empty[s], stage.phase ^ 1);
        mbar_arrive_expect_tx(&sync.full[s], tx);
        tma_load_5d(dy_box(s), &map_dy, &sync.full[s], w.w * BS, origin);
      }
      __syncwarp();  // the stage is claimed and its byte count set before the copies land
      if (lane < blocks) {
        int32_t at[ConvTiles::kAxes];  // the halo box: ConvTiles::halo_origin
#pragma unroll
        for (int a = 0; a < ConvTiles::kAxes; ++a) at[a] = origin[a] + (a < 3 ? ct.halo_lo[a] : 0);
        tma_load_5d(halo(s, lane), &map_x, &sync.full[s], row * BS, at);
      }
    }
  }
}

/// Row `row` of dw block k from the accumulator rows g + 8h of an m64nBS wgmma's layout (this lane's
/// columns 8·jj + 2·t4 and + 1): into dw where the tiles are one part, else into part `part`'s f32 sums.
template <class TO, int BS>
__device__ __forceinline__ void store_dw_row(TO* dw, float* partial, int parts, int part, int64_t nnz, int64_t k,
                                             int row, const float (&acc)[BS / 2], int h, int t4) {
#pragma unroll
  for (int jj = 0; jj < BS / 8; ++jj) {
    const int64_t at = (k * BS + row) * BS + 8 * jj + 2 * t4;
    const float v0 = acc[4 * jj + 2 * h], v1 = acc[4 * jj + 2 * h + 1];
    if (parts == 1)
      store_pair(dw + at, v0, v1, false);
    else
      *reinterpret_cast<float2*>(partial + part * nnz * BS * BS + at) = make_float2(v0, v1);
  }
}

/// The parts of a halo dW launch (conv_tiles.h's conv_dw_parts over `grid` thread blocks, `steps` tiles of
/// `positions` output positions): tiles per part, parts with tiles, and their f32 sums where there are
/// several (freed in stream order after the kernels).
struct DwParts {
  int part_steps, parts;
  Tensor partial;
  float* sums() const { return parts > 1 ? static_cast<float*>(partial.data_ptr()) : nullptr; }
};

/// TESSERA_BSCONV_DW_PARTS=N (1 .. 64; the lab's, for sweeps: bsconv_gpu --dw-parts): N parts instead of the
/// rule's choice; 0 where unset.
int forced_dw_parts() {
  const char* e = std::getenv("TESSERA_BSCONV_DW_PARTS");
  if (!e) return 0;
  char* end = nullptr;
  const long n = std::strtol(e, &end, 10);
  TS_CHECK(end != e && *end == 0 && n >= 1 && n <= 64, ValueError,
           "TESSERA_BSCONV_DW_PARTS must be a count of 1 to 64, not '" << e << "'");
  return static_cast<int>(n);
}

DwParts dw_parts(const BlockGradient& g, int bs, int steps, int positions, int grid, int device) {
  DwParts d;
  const int forced = forced_dw_parts();
  const int chosen = std::min(steps, forced > 0 ? forced : conv_dw_parts(g.col_runs, steps, grid, positions));
  d.part_steps = (steps + chosen - 1) / chosen;
  d.parts = (steps + d.part_steps - 1) / d.part_steps;  // every part has tiles
  TS_CHECK(static_cast<int64_t>(g.col_runs) * d.parts < INT32_MAX, ShapeError, "bsconv_dw: too many work items");
  if (d.parts > 1) {
    d.partial = empty({d.parts * g.nnz * bs * bs}, TensorOptions(DType::f32).device(Device::cuda(device)));
  }
  return d;
}

/// dw = the sum of the parts' f32 sums, in part order (after the kernel that wrote them); nothing for one part.
template <class TO>
void sum_dw_parts(const BlockGradient& g, int bs, const DwParts& d, int grid, cudaStream_t stream) {
  if (d.parts == 1) return;
  const int64_t elems = g.nnz * bs * bs;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((elems / 2 + threads - 1) / threads, 8 * grid));
  sum_parts<TO><<<blocks, threads, 0, stream>>>(d.sums(), static_cast<TO*>(g.dw), elems, d.parts);
  TS_CUDA_LAUNCH_CHECK("bsconv_dw (halo, sum of parts)");
}

}  // namespace
}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
