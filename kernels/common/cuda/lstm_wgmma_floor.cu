// Lab (issue 16): what one step of a dense LSTM recurrence costs when its product runs on wgmma
// from shared memory, the structure docs/lstm_gpu.md names as the next one ("Where the limits
// are"), before any of the production kernel's features are rebuilt on it. bench/lstm_step times
// it beside the production kernel's steps and the bare grid barrier (rows "step floor: wgmma");
// tests/gpu checks its arithmetic against the CPU.
//
// The problem: hidden H = 1024, batch 64, bf16, one thread block per group of 8 units (128 blocks,
// one per SM, a cooperative launch). Block g keeps its slice of W over the first K columns
// resident in shared memory (TMA boxes of [N, 64], 128-byte swizzle) and per step t multiplies the
// step's operand a_t (rows t·64 … of a) by it, both K-major, with m64nNk16 wgmmas:
//   forward   a = h [(T + 1)·64, H], W = wt [4H, H] (row n: gate column n), block g's rows
//             32g … 32g+31 (N 32: gates i, f, o, u of units 8g … 8g+7, nn::LSTM's order):
//               P [64, 32] = h_t[:, :K] · wt[32g …, :K]ᵀ
//               i, f, o = σ(P[:, 0:8], P[:, 8:16], P[:, 16:24]), u = tanh(P[:, 24:32])
//               c = f·c + i·u (c0 = 0, f32 in registers), h_{t+1}[:, 8g … 8g+7] = o·tanh(c) (bf16)
//   backward  a = dpre [(T + 1)·64, 4H], W = w [H, 4H] (row u: unit u's row of W_h), block g's
//             rows 8g … 8g+7 (N 8), the shape of dh = dpre_{t+1}·W_hᵀ, with a stand-in for the
//             gate gradients that keeps the dependence and the stores:
//               v = tanh(P [64, 8]), d = d/2 + v (d0 = 0, f32 in registers),
//               a_{t+1}[:, j·H + 8g …] = s_j·d for the gates j, s = (1/2, 1/4, 1/8, 1) (bf16)
// a_t comes from L2 in [64, 64] TMA boxes through a ring of kRing stages (a producer warp, full /
// empty mbarriers). The grid barrier is split: each block's consumers arrive (a global counter)
// once their part of a_{t+1} is stored, and only the producer waits for a step's arrivals before
// it copies the next operand; the consumers wait on the copies alone. No input term, no saved
// gates: the floor of a step on this structure, against the production kernels' (mma.sync from a
// cp.async ring) 9.4 / 13.4 µs forward / backward (dense H 1024, K split over pairs) and the bare
// barrier's 1.1-1.4 µs. Each sum has a fixed order: the same inputs give the same bits.
//
// Clusters (kCluster 2 or 4): every block of a cluster needs the same operand a_t, so each box is
// copied from L2 once per cluster, by the producer of rank (box index mod kCluster), multicast into
// the same ring stage of every block. The first run (H100, 2026-12-06) showed the step bound by L2
// bandwidth: forward 4.24 / 5.72 µs at K 512 / 1024, backward 7.48 / 12.93 µs at K 2048 / 4096,
// about 6 TB/s of operand reads across the 128 blocks over a fixed 2-2.8 µs. Multicast divides those
// reads by kCluster. Its ring protocol (the TMA multicast pipeline): a stage's empty barrier counts
// the consumer warps of the whole cluster (each warp arrives on that stage's empty barrier in every
// block), so a producer that sees its own empty barrier complete knows the stage is free in every
// block it writes to; every producer then expects the box's bytes on its own full barrier (the
// copy of a peer may land before that, which the transaction count allows), and the box's owner
// issues the copy. The cluster meets after the barriers' init and before any block exits (no copy
// or arrival may reach a block that has ended).
#include <cuda.h>

#include "core/cuda/check.cuh"
#include "core/cuda/runtime.h"
#include "kernels/common/cuda/bsmm_sm90_common.cuh"
#include "kernels/common/cuda/lstm_gate_math.cuh"
#include "kernels/common/cuda/lstm_persistent.h"
#include "kernels/common/cuda/lstm_wgmma_ring.cuh"

namespace tessera {
namespace cuda {
namespace sm90 {
namespace {

constexpr int kFloorH = 1024;         // hidden units
constexpr int kFloorUnits = 8;        // units of a block
constexpr int kFloorThreads = 160;    // the consumer warpgroup, the producer warp
constexpr int kRing = kWgmmaRing;     // operand stages
constexpr int kABox = kWgmmaABox;     // a [64, 64] bf16 box of the operand

template <bool kBackward>
struct FloorShape {
  static constexpr int kIn = kBackward ? 4 * kFloorH : kFloorH;               // the operand's width
  static constexpr int kN = kBackward ? kFloorUnits : 4 * kFloorUnits;       // product columns of a block
  static constexpr int kWBox = kN * 64 * 2;                                   // a [N, 64] bf16 box of W
  static constexpr int kMaxBoxes = kIn / 64;
  static constexpr int kSmem = kMaxBoxes * kWBox + kRing * kABox + 1024 + 1024;  // + barriers, + alignment
};


// The grid barrier is split in two (lstm_wgmma_ring.cuh): the consumers of every block arrive once
// their h_{t+1} is stored (a named barrier of the 128, then one thread's fence and atomic), and the
// producer alone waits for all arrivals of a step before it copies the next step's h. The
// consumers never wait on the grid: their next step waits on the copies.

template <bool kBackward, int kCluster>
__global__ void __launch_bounds__(kFloorThreads, 1)
    wgmma_floor_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_w,
                       __nv_bfloat16* __restrict__ a, int steps, int boxes, unsigned* counter) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Shape = FloorShape<kBackward>;
  constexpr int N = Shape::kN;
  extern __shared__ uint8_t smem_raw[];
  const RingSmem m = carve_ring_smem(smem_raw, Shape::kMaxBoxes * Shape::kWBox);  // W: boxes × [N, 64]
  uint8_t *w_s = m.w, *ring = m.ring;
  uint64_t *full = m.full, *empty = m.empty, *w_bar = m.w_bar;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = blockIdx.x;
  const int rank = kCluster > 1 ? cluster_rank() : 0;
  init_ring_barriers<kCluster>(full, empty, w_bar);
  if (warp == 4) {  // the producer: W once, then per step the boxes of a_t, after the grid's arrivals
    if (lane == 0) {
      mbar_arrive_expect_tx(w_bar, boxes * Shape::kWBox);
      for (int k = 0; k < boxes; ++k) tma_load_2d(w_s + k * Shape::kWBox, &map_w, w_bar, k * 64, g * N);
      for (int t = 0, n = 0; t < steps; ++t, n += boxes) {
        if (t > 0) {
          wait_count(counter, static_cast<unsigned>(t) * gridDim.x);
          fence_proxy_async_global();  // the other blocks' stores of a_t (generic) before these TMA reads
        }
        for (int k = 0; k < boxes; ++k) {
          const int s = (n + k) % kRing;
          mbar_wait(&empty[s], (((n + k) / kRing) & 1) ^ 1);  // free in every block of the cluster
          mbar_arrive_expect_tx(&full[s], kABox);
          if constexpr (kCluster == 1) {
            tma_load_2d(ring + s * kABox, &map_a, &full[s], k * 64, t * 64);
          } else if ((n + k) % kCluster == rank) {
            tma_load_2d_multicast(ring + s * kABox, &map_a, &full[s], k * 64, t * 64, (1u << kCluster) - 1);
          }
        }
      }
    }
    __syncwarp();
    if constexpr (kCluster > 1) cluster_meet();
    return;
  }
  const int wq = lane / 4, q = lane % 4;     // the accumulator layout of wgmma_sm90.cuh
  float c[2][2] = {{0.f, 0.f}, {0.f, 0.f}};  // the state of rows 16·warp + wq + 8·hh, units 2q + e
  mbar_wait(w_bar, 0);
  for (int t = 0, n = 0; t < steps; ++t, n += boxes) {
    float acc[N / 2];
    ring_product<__nv_bfloat16, N>(acc, ring, w_s, full, empty, n, boxes, lane, release_stage<kCluster>);
    // acc[4j + 2hh + e]: row 16·warp + wq + 8hh, column 8j + 2q + e (forward: gate j of unit 2q + e;
    // backward, j = 0 only: unit 2q + e)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int64_t row = static_cast<int64_t>(t + 1) * 64 + 16 * warp + wq + 8 * hh;
      const int u = g * kFloorUnits + 2 * q;
      float out[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if constexpr (!kBackward) {
          const float ig = sigmoid_fast(acc[2 * hh + e]), fg = sigmoid_fast(acc[4 + 2 * hh + e]);
          const float og = sigmoid_fast(acc[8 + 2 * hh + e]), ug = tanh_fast(acc[12 + 2 * hh + e]);
          c[hh][e] = fg * c[hh][e] + ig * ug;
          out[e] = og * tanh_fast(c[hh][e]);
        } else {
          c[hh][e] = 0.5f * c[hh][e] + tanh_fast(acc[2 * hh + e]);
          out[e] = c[hh][e];
        }
      }
      if constexpr (!kBackward) {
        *reinterpret_cast<__nv_bfloat162*>(a + row * kFloorH + u) = __floats2bfloat162_rn(out[0], out[1]);
      } else {
        constexpr float kScale[4] = {0.5f, 0.25f, 0.125f, 1.f};
#pragma unroll
        for (int j = 0; j < 4; ++j)
          *reinterpret_cast<__nv_bfloat162*>(a + row * 4 * kFloorH + j * kFloorH + u) =
              __floats2bfloat162_rn(kScale[j] * out[0], kScale[j] * out[1]);
      }
    }
    arrive_grid(counter);  // the step's outputs stored: the block's arrival
  }
  if constexpr (kCluster > 1) cluster_meet();  // no peer's copy or arrival is still on its way here
#else
  __trap();  // compiled for another architecture: the host never launches this
#endif
}

template <bool kBackward, int kCluster>
void launch_floor(const Tensor& a, const Tensor& w, int boxes) {
  using Shape = FloorShape<kBackward>;
  const int device = a.device().index;
  const int steps = static_cast<int>(a.size(0) / 64 - 1), grid = kFloorH / kFloorUnits;
  constexpr auto kernel = &wgmma_floor_kernel<kBackward, kCluster>;
  TS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Shape::kSmem));
  if constexpr (kCluster > 1) {  // all clusters resident at once, or a clear refusal before anything runs
    const int resident = resident_blocks(kernel, device, kFloorThreads, Shape::kSmem, kCluster);
    TS_CHECK(resident >= grid, NotImplementedError,
             "wgmma step floor: " << grid / kCluster << " clusters of " << kCluster
                                  << " blocks cannot be resident at once on this GPU (" << resident / kCluster
                                  << " can)");
  }
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t cfg =
      wgmma_launch_config(grid, kFloorThreads, Shape::kSmem, current_stream(a), kCluster, true, attrs);
  const CUtensorMap map_a = tensor_map(a.data_ptr(), DType::bf16, static_cast<uint64_t>(a.size(0)), Shape::kIn, 64, 64);
  const CUtensorMap map_w =
      tensor_map(w.data_ptr(), DType::bf16, static_cast<uint64_t>(w.size(0)), Shape::kIn, Shape::kN, 64);
  unsigned* counter = static_cast<unsigned*>(allocate(256, device));
  TS_CUDA_CHECK(cudaMemsetAsync(counter, 0, 256, cfg.stream));
  const cudaError_t launched = cudaLaunchKernelEx(&cfg, kernel, map_a, map_w, static_cast<__nv_bfloat16*>(a.data_ptr()),
                                                  steps, boxes, counter);
  deallocate(counter, 256, device);  // stream-ordered: freed after the launch
  TS_CUDA_CHECK(launched);
  TS_CUDA_LAUNCH_CHECK("lstm wgmma step floor");
}

template <bool kBackward>
void launch_floor_clustered(const Tensor& a, const Tensor& w, int boxes, int cluster) {
  switch (cluster) {
    case 1: return launch_floor<kBackward, 1>(a, w, boxes);
    case 2: return launch_floor<kBackward, 2>(a, w, boxes);
    case 4: return launch_floor<kBackward, 4>(a, w, boxes);
    default: TS_THROW(ValueError, "wgmma step floor: clusters of 1, 2 or 4 blocks, not " << cluster);
  }
}

}  // namespace
}  // namespace sm90

int wgmma_step_floor(const Tensor& a, const Tensor& w, int64_t k_cols, bool backward, int cluster) {
  constexpr int64_t H = sm90::kFloorH;
  const int64_t in = backward ? 4 * H : H, w_rows = backward ? H : 4 * H;
  const char* what = backward ? "wgmma step floor (backward)" : "wgmma step floor (forward)";
  TS_CHECK(a.device().is_cuda() && w.device().is_cuda(), ValueError, what << ": the operand and W must be on a GPU");
  TS_CHECK(a.dtype() == DType::bf16 && w.dtype() == DType::bf16, ValueError, what << ": bf16 only");
  TS_CHECK(a.dim() == 2 && a.size(1) == in && a.size(0) % 64 == 0 && a.size(0) >= 128, ShapeError,
           what << ": the operand must be [(T + 1)·64, " << in << "], not " << a.shape());
  TS_CHECK(w.dim() == 2 && w.size(0) == w_rows && w.size(1) == in, ShapeError,
           what << ": W must be [" << w_rows << ", " << in << "], not " << w.shape());
  TS_CHECK(k_cols > 0 && k_cols % 64 == 0 && k_cols <= in, ValueError,
           what << ": K must be a multiple of 64 up to " << in << ", not " << k_cols);
  TS_CHECK(sm90::device_ok(a.device().index), NotImplementedError, what << ": compute capability 9.0 only");
  if (backward) {
    sm90::launch_floor_clustered<true>(a, w, static_cast<int>(k_cols / 64), cluster);
  } else {
    sm90::launch_floor_clustered<false>(a, w, static_cast<int>(k_cols / 64), cluster);
  }
  return static_cast<int>(H / sm90::kFloorUnits);
}

}  // namespace cuda
}  // namespace tessera
