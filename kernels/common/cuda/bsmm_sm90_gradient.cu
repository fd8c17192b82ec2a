// The Hopper (sm_90a) kernel of bsmm_dw (see bsmm_sm90.h), every block size 8, 16, 32, 64.
//
// Work items are (run, part of N): a run is up to kG = 256/bs consecutive entries of one block
// column's list (the layout's dw_col_run table, longest first), whose blocks share the column's
// dY strip; a part is a range of the N rows (parts = 1 unless the rule below splits N). They go
// to the thread blocks that are free as in the gather kernel (the first by blockIdx.x, then the
// layout's counter; an mbarrier ring to the consumers). Per 64-row step of the part the
// producer warp copies the dY strip [64, bs] of the column and the X strips [64, bs] of the
// run's block rows into one stage. A product stacks the X strips of kPack = 64/bs blocks along
// M (MN-major, the strips kStripBytes apart) against the dY strip (MN-major), so that every
// block size fills the m64 tile:
//
//   acc [64, bs] += [X_r0 | X_r1 | ...][t0 .. t0+64, :]ᵀ · dY_c[t0 .. t0+64, :]
//   (rows i·bs .. i·bs + bs of acc are block r_i's)
//
// At bs 8 the strips' rows are 16 bytes, half an L2 sector each: there the op passes Xᵀ [C, n]
// and dYᵀ [K, n] instead (BlockGradient::transposed), whose strips [bs, 64] are bs rows of 128
// bytes, K-major for the products.
//
// Each consumer warpgroup computes two products (2·kPack blocks). With one part the tile is
// stored into dw (the accumulate mode adds to it), scaled by the block's gate when gated, and
// dgate = sum P ⊙ w is summed from the same registers (each lane in element order, then the
// warp's lanes by a fixed shuffle tree, then the block's warps in order); with several parts,
// each part stores its f32 partial sums into a workspace [parts, nnz, bs, bs] and a second kernel
// adds the parts in order 0, 1, ... and stores dw (and dgate: bsmm_gate.cuh).
//
// Deterministic: each element is summed by one thread in row order within a part, and the parts
// in a fixed order; no atomics on data. The part count depends only on (layout, N, device).
#include "kernels/common/cuda/bsmm_sm90.h"

#include <cmath>
#include <cstdlib>

#include "core/tensor.h"
#include "kernels/common/cuda/bsmm_gate.cuh"
#include "kernels/common/cuda/bsmm_sm90_common.cuh"

namespace tessera {
namespace cuda {
namespace sm90 {
namespace {

template <int BS>
struct GradientTile {
  static constexpr int kKT = 64;                       // rows of n per stage
  static constexpr int kRowBytes = 2 * BS;             // one row of a strip
  static constexpr int kStripBytes = kKT * kRowBytes;  // a [64, bs] strip of X or dY
  static constexpr int kPack = 64 / BS;                // blocks per m64 product
  static constexpr int kG = 4 * kPack;                 // blocks per run: two products per consumer warpgroup
  static constexpr int kStageBytes = (1 + kG) * kStripBytes;  // dY strip, then the X strips
  static constexpr int kStages = 210 * 1024 / kStageBytes < 8 ? 210 * 1024 / kStageBytes : 8;
  static constexpr int kItemRing = 4;
  static constexpr int kGateSums = 2 * 2 * 2 * 4;  // dgate's warp sums [item parity][consumer][product][warp]
  static constexpr int kSmemBytes =
      kStages * kStageBytes + 2 * kStages * 8 + kItemRing * (16 + 16) + kGateSums * 4 + 1024;
};

/// The descriptor of an MN-major operand whose k16 slice starts at `p`, atoms along MN
/// `atom_stride` bytes apart (see wgmma_sm90.cuh).
template <int kRowBytes>
__device__ __forceinline__ uint64_t mn_major(const uint8_t* p, uint32_t atom_stride) {
  if constexpr (kRowBytes == 16) return make_desc(p, 8 * kRowBytes, atom_stride, kRowBytes);
  return make_desc(p, atom_stride, 8 * kRowBytes, kRowBytes);
}

template <class T, class TO, int BS, bool kT, bool kConv>
__global__ void __launch_bounds__(kThreads, 1)
    gradient_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_dy,
                    BlockGradient p, int parts, int part_steps, float* __restrict__ partial, ConvTiles ct) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tile = GradientTile<BS>;
  constexpr int kStages = Tile::kStages, kRing = Tile::kItemRing, kPack = Tile::kPack;
  constexpr int kRowBytes = Tile::kRowBytes;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align1024(smem_raw);
  const DwSync sync = dw_sync<kStages, kRing>(smem, Tile::kStageBytes);
  uint64_t *full = sync.full, *empty = sync.empty, *item_full = sync.item_full, *item_empty = sync.item_empty;
  int4* ring = sync.ring;
  float* gate_sums = reinterpret_cast<float*>(ring + kRing);  // [2][2][2][4], bs 32 and 64 only
  auto strip = [&](int s, int i) { return smem + s * Tile::kStageBytes + i * Tile::kStripBytes; };  // 0: dY, 1+b: X

  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
  const int steps = kConv ? ct.total_tiles : static_cast<int>((p.n + Tile::kKT - 1) / Tile::kKT);
  const int items = p.col_runs * parts;
  // A convolution's runs are of entries (block at list position q / taps, tap q % taps), and its
  // blocks k·taps + tap of dw [nnz, taps, bs, bs].
  const int taps = kConv ? ct.taps : 1;
  auto block_of = [&](int q) {
    if constexpr (kConv) return p.col_blocks[q / taps] * taps + q % taps;
    return p.col_blocks[q];
  };

  if (wg == 0) {
    // Producer: warp 0. Lane 0 takes items (part-major: every run of part 0, the longest first,
    // then part 1, ..., so that the thread blocks at work read the same rows of X and dY) and
    // hands them to the consumers; per step lane 0 claims a stage and copies the dY strip, and
    // lane b < count copies block b's X strip (count <= 32).
    if (threadIdx.x >= 32) return;
    if (lane == 0) {
      prefetch_tma_map(&map_x);
      prefetch_tma_map(&map_dy);
    }
    int it = 0, taken = blockIdx.x;
    for (int n = 0;; ++n) {
      const int4 w = next_run_item<kRing>(p, items, n, taken, lane, item_full, item_empty, ring);
      if (w.y == 0) break;
      const int count = w.y, first = w.z * part_steps, last = min(steps, first + part_steps);
      int row = 0;  // the block row of lane's block
      // Convolution: the tile's origin, walked from tile to tile without division, and how far
      // the box of x that lane's block reads lies from it (its tap's offset)
      int32_t origin[ConvTiles::kAxes] = {0, 0, 0, 0}, tap_off[ConvTiles::kAxes] = {0, 0, 0, 0};
      if constexpr (kConv) ct.origin(first, origin);
      if (lane < count) {
        const int q = w.x + lane;
        row = p.col_rows[q / taps];
        if constexpr (kConv) ct.tap_offset(q % taps, tap_off);
      }
      for (int step = first; step < last; ++step, ++it) {
        const int s = it % kStages;
        if (lane == 0) {
          mbar_wait(&empty[s], ((it / kStages) & 1) ^ 1);
          mbar_arrive_expect_tx(&full[s], (1 + count) * Tile::kStripBytes);
          if constexpr (kConv) {  // the tile's box of dY
            tma_load_5d(strip(s, 0), &map_dy, &full[s], w.w * BS, origin);
          } else if constexpr (kT) {
            tma_load_2d(strip(s, 0), &map_dy, &full[s], step * Tile::kKT, w.w * BS);
          } else {
            tma_load_2d(strip(s, 0), &map_dy, &full[s], w.w * BS, step * Tile::kKT);
          }
        }
        __syncwarp();  // the stage is claimed and its byte count set before the copies land
        if (lane < count) {
          if constexpr (kConv) {  // the box of x that the tile's positions read at the block's tap
            int32_t at[ConvTiles::kAxes];
#pragma unroll
            for (int a = 0; a < ConvTiles::kAxes; ++a) at[a] = origin[a] + tap_off[a];
            tma_load_5d(strip(s, 1 + lane), &map_x, &full[s], row * BS, at);
          } else if constexpr (kT)
            tma_load_2d(strip(s, 1 + lane), &map_x, &full[s], step * Tile::kKT, row * BS);
          else
            tma_load_2d(strip(s, 1 + lane), &map_x, &full[s], row * BS, step * Tile::kKT);
        }
        if constexpr (kConv) ct.next_origin(origin);
      }
    }
    return;
  }

  // Consumer warpgroup c computes products 2c and 2c + 1 of each item (blocks kPack·(2c + j) ..
  // of the run, those it has).
  const int c = wg - 1, warp = (threadIdx.x / 32) % 4, g = lane / 4, t = lane % 4;
  TO* dw = static_cast<TO*>(p.dw);
  int it = 0;
  for (int n = 0;; ++n) {
    const int4 w = receive_item<kRing>(n, item_full, item_empty, ring, lane);
    if (w.y == 0) break;
    const int q0 = w.x, count = w.y, part = w.z;
    const int first = part * part_steps, last = min(steps, first + part_steps);
    // Both products run even where the run has fewer blocks (on stale shared memory, whose rows
    // are never stored): a wgmma under a branch makes ptxas serialize every wgmma of the kernel.
    float acc[2][BS / 2];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int i = 0; i < BS / 2; ++i) acc[j][i] = 0.f;
    for (int step = first; step < last; ++step, ++it) {
      const int s = it % kStages;
      mbar_wait(&full[s], (it / kStages) & 1);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Tile::kKT / 16; ++kk) {
        // A (m = i, k = row) = X_strips[row][i], B (k = row, n = j) = dY[row][j]: both MN-major;
        // transposed: A = Xᵀ_strips[i][row], B = dYᵀ[j][row], both K-major (rows of 128 bytes,
        // 8-row groups 1024 bytes apart, the k16 slice 32 bytes into the rows)
        const uint64_t db = kT ? make_desc(strip(s, 0) + kk * 32, 16, 1024, 128)
                               : mn_major<kRowBytes>(strip(s, 0) + kk * 16 * kRowBytes, Tile::kStripBytes);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          uint8_t* a = strip(s, 1 + kPack * (2 * c + j));
          const uint64_t da = kT ? make_desc(a + kk * 32, 16, 1024, 128)
                                 : mn_major<kRowBytes>(a + kk * 16 * kRowBytes, Tile::kStripBytes);
          Wgmma<T, BS>::template run<kT ? 0 : 1, kT ? 0 : 1>(acc[j], da, db, step > first || kk > 0);
        }
      }
      wgmma_commit();
      wgmma_wait<1>();
#pragma unroll
      for (int j = 0; j < 2; ++j) fence_operands(acc[j]);
      // The whole warp's reads of the previous stage come before lane 0 releases it.
      __syncwarp();
      if (step > first && lane == 0) mbar_arrive(&empty[(it - 1) % kStages]);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int j = 0; j < 2; ++j) fence_operands(acc[j]);
    __syncwarp();
    if (last > first && lane == 0) mbar_arrive(&empty[(it - 1) % kStages]);
    // Row i of product j is row i % bs of block kPack·(2c + j) + i / bs of the run (the same block
    // for the whole warp at a given h). With a gate (and one part): dw = gate·P, and each lane's
    // sum of P ⊙ w over its elements, summed over the warp (gsum[j][h], every lane the same bits).
    const bool gated = p.gate != nullptr && parts == 1;
    float gsum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = warp * 16 + g + 8 * h, b = kPack * (2 * c + j) + i / BS;
        if (b >= count) continue;  // the same for every lane of the warp
        const int64_t k = block_of(q0 + b);
        const float scale = gated ? load_one(static_cast<const T*>(p.gate) + k) : 1.f;
#pragma unroll
        for (int jj = 0; jj < BS / 8; ++jj) {
          const int64_t at = (k * BS + i % BS) * BS + 8 * jj + 2 * t;
          const float v0 = acc[j][4 * jj + 2 * h], v1 = acc[j][4 * jj + 2 * h + 1];
          if (parts == 1) {
            if (gated) {
              const float2 wv = load_pair(static_cast<const T*>(p.w) + at);
              gsum[j][h] += v0 * wv.x + v1 * wv.y;
            }
            store_pair(dw + at, scale * v0, scale * v1, p.accumulate);
          } else {
            *reinterpret_cast<float2*>(partial + part * p.nnz * BS * BS + at) = make_float2(v0, v1);
          }
        }
        if (gated) gsum[j][h] = warp_reduce(gsum[j][h], SumOp{});
      }
    }
    if (gated) {
      // dgate of block b: the sums of the (warp, h) rows it covers, warps then h in order. bs 8
      // and 16 have one warp per block; bs 32 and 64 add 2 or 4 warps through shared memory.
      TO* dgate = static_cast<TO*>(p.dgate);
      if constexpr (BS <= 16) {
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int b = kPack * (2 * c + j) + (warp * 16 + 8 * h) / BS;
            if (BS == 16 && h == 1) continue;
            const float v = BS == 16 ? gsum[j][0] + gsum[j][1] : gsum[j][h];
            if (lane == 0 && b < count) store_one(dgate + block_of(q0 + b), v);
          }
      } else {
        // [parity][c][j][warp]: an item's sums are read before the barrier of the item after
        // next, the first one that may overwrite them.
        float* sums = gate_sums + ((n & 1) * 2 + c) * 8;
        if (lane == 0) {
          sums[warp] = gsum[0][0] + gsum[0][1];
          sums[4 + warp] = gsum[1][0] + gsum[1][1];
        }
        named_barrier(1 + c, 128);
        constexpr int kWarpsPerBlock = BS / 16;
        if (warp == 0 && lane < 2 * kPack) {
          const int j = lane / kPack, sb = lane % kPack, b = kPack * (2 * c + j) + sb;
          float v = 0.f;
#pragma unroll
          for (int m = 0; m < kWarpsPerBlock; ++m) v += sums[4 * j + sb * kWarpsPerBlock + m];
          if (b < count) store_one(dgate + block_of(q0 + b), v);
        }
      }
    }
  }
#else
  __trap();
#endif
}

// The parts N is split into: the count (1 to 16, each part at least 8 steps of 64 rows) that
// minimizes the estimated time
//   waves(runs·parts over the grid) · (steps per part + 2)
//   + (parts > 1: the partial sums' traffic, (parts + 1)·nnz·bs²·4 bytes, in steps of the
//     kernel's per-step traffic over the whole grid, + 2 for the second launch),
// in units of one step of one item; ties to the fewer parts. TESSERA_BSMM_DW_PARTS=P forces P
// (for measurements; other bits than the rule's when it differs).
template <int BS>
int choose_parts(const BlockGradient& g, int steps, int grid) {
  using Tile = GradientTile<BS>;
  if (const char* e = std::getenv("TESSERA_BSMM_DW_PARTS")) {
    const int forced = std::atoi(e);
    if (forced >= 1) return std::min(forced, steps);
  }
  const double step_bytes = static_cast<double>(grid) * Tile::kStageBytes;
  const double block_bytes = static_cast<double>(g.nnz) * BS * BS * 4;
  int best = 1;
  double best_cost = 0;
  for (int parts = 1; parts <= 16 && (parts == 1 || steps / parts >= 8); ++parts) {
    const int per = (steps + parts - 1) / parts, used = (steps + per - 1) / per;
    if (used != parts) continue;
    const double waves = std::ceil(static_cast<double>(g.col_runs) * parts / grid);
    double cost = waves * (per + 2);
    if (parts > 1) cost += (parts + 1) * block_bytes / step_bytes + 2;
    if (parts == 1 || cost < best_cost) {
      best = parts;
      best_cost = cost;
    }
  }
  return best;
}

// conv: the convolution's tiles of 64 output positions (conv_tiles.h) for bsconv_dw; nullptr: bsmm_dw.
template <class T, class TO, int BS, bool kT, bool kConv = false>
void launch(const BlockGradient& g, int device, cudaStream_t stream, const ConvTiles* conv = nullptr) {
  using Tile = GradientTile<BS>;
  CUtensorMap map_x, map_dy;
  ConvTiles ct{};
  if constexpr (kConv) {
    ct = *conv;
    map_x = conv_map(g.x, g.in_dtype, g.C, ct.a_ext, BS, ct.box);
    map_dy = conv_map(g.dy, g.in_dtype, g.K, ct.ext, BS, ct.box);
  } else {
    map_x = kT ? tensor_map(g.x, g.in_dtype, g.C, g.n, BS, Tile::kKT)
               : tensor_map(g.x, g.in_dtype, g.n, g.C, Tile::kKT, BS);
    map_dy = kT ? tensor_map(g.dy, g.in_dtype, g.K, g.n, BS, Tile::kKT)
                : tensor_map(g.dy, g.in_dtype, g.n, g.K, Tile::kKT, BS);
  }
  constexpr auto kernel = &gradient_kernel<T, TO, BS, kT, kConv>;
  const int persistent = persistent_grid<kernel>(Tile::kSmemBytes);
  const int steps = kConv ? ct.total_tiles : static_cast<int>((g.n + Tile::kKT - 1) / Tile::kKT);
  const int chosen = choose_parts<BS>(g, steps, persistent);
  const int part_steps = (steps + chosen - 1) / chosen;
  const int parts = (steps + part_steps - 1) / part_steps;  // every part has rows
  const int64_t elems = g.nnz * BS * BS;
  TS_CHECK(static_cast<int64_t>(g.col_runs) * parts < INT32_MAX, ShapeError, "bsmm_dw: too many work items");
  Tensor partial;  // freed in stream order after the kernels below
  if (parts > 1)
    partial = empty({parts * elems}, TensorOptions(DType::f32).device(Device::cuda(device)));
  const int grid = static_cast<int>(std::min<int64_t>(static_cast<int64_t>(g.col_runs) * parts, persistent));
  float* partial_sums = parts > 1 ? static_cast<float*>(partial.data_ptr()) : nullptr;
  kernel<<<grid, kThreads, Tile::kSmemBytes, stream>>>(map_x, map_dy, g, parts, part_steps, partial_sums, ct);
  TS_CUDA_LAUNCH_CHECK((kConv ? "bsconv_dw" : "bsmm_dw"));
  if (parts > 1 && g.gate != nullptr) {
    launch_bsmm_gate_epilogue<float, T, TO>(static_cast<const float*>(partial.data_ptr()), parts, g.nnz, BS, g.w,
                                             g.gate, g.dw, g.dgate, g.accumulate, stream);
    TS_CUDA_LAUNCH_CHECK("bsmm_dw (sum of parts, gate epilogue)");
  } else if (parts > 1) {
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((elems / 4 + threads - 1) / threads, 8 * persistent));
    sum_parts_kernel<TO><<<blocks, threads, 0, stream>>>(static_cast<const float*>(partial.data_ptr()),
                                                         static_cast<TO*>(g.dw), elems, parts, elems,
                                                         g.accumulate);
    TS_CUDA_LAUNCH_CHECK("bsmm_dw (sum of parts)");
  }
  g_launches.fetch_add(1, std::memory_order_relaxed);
  if (kConv) g_conv_launches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

bool gradient_supported(const BlockGradient& g, int device) {
  return (g.bs == 8 || g.bs == 16 || g.bs == 32 || g.bs == 64) && half_dtype(g.in_dtype) &&
         (g.out_dtype == g.in_dtype || g.out_dtype == DType::f32) && aligned16(g.x) && aligned16(g.dy) &&
         aligned16(g.dw) && g.n > 0 && g.n <= INT32_MAX && (!g.transposed || (g.bs == 8 && g.n % 8 == 0)) &&
         device_ok(device);
}

// bs 8 only. On the H200 the transposed kernel is 8% (bs 32) to 25% (bs 16) faster than the
// direct one at density 1, but the two transposes (permute_copy, ~1.1 TB/s: 0.2 ms for X and dY
// of the 8192 x 4096 x 4096 shape) cost more than that saves at bs 16 and 32; at bs 8 the whole
// call is 1.3x faster (transformer shape, every density).
bool gradient_wants_transposed(const BlockGradient& g) { return g.bs == 8 && g.n % 8 == 0; }


void block_gradient(const BlockGradient& g, int device, cudaStream_t stream) {
  if (g.col_runs == 0) return;
  dispatch_types(g.in_dtype, g.out_dtype, [&](auto tin, auto tout) {
    using T = typename decltype(tin)::type;
    using TO = typename decltype(tout)::type;
    switch (g.bs) {
      case 64: return launch<T, TO, 64, false>(g, device, stream);
      case 32: return launch<T, TO, 32, false>(g, device, stream);
      case 16: return launch<T, TO, 16, false>(g, device, stream);
      default:
        if (g.transposed) return launch<T, TO, 8, true>(g, device, stream);
        return launch<T, TO, 8, false>(g, device, stream);
    }
  });
}


bool conv_gradient_supported(const BlockGradient& g, const ConvIndex& ci, int device) {
  return conv_tiles_support(ci) && g.gate == nullptr && !g.transposed && gradient_supported(g, device);
}

void conv_gradient(const BlockGradient& g, const ConvIndex& ci, int64_t batch, int device, cudaStream_t stream) {
  if (g.col_runs == 0) return;
  const ConvTiles ct = conv_tiles(ci, batch, /*dx=*/false, GradientTile<64>::kKT, TileBoxes::per_tap);
  dispatch_types(g.in_dtype, g.out_dtype, [&](auto tin, auto tout) {
    using T = typename decltype(tin)::type;
    using TO = typename decltype(tout)::type;
    switch (g.bs) {
      case 64: return launch<T, TO, 64, false, true>(g, device, stream, &ct);
      case 32: return launch<T, TO, 32, false, true>(g, device, stream, &ct);
      case 16: return launch<T, TO, 16, false, true>(g, device, stream, &ct);
      default: return launch<T, TO, 8, false, true>(g, device, stream, &ct);
    }
  });
}


}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
