// Lab (issue 16): what one step of a dense LSTM recurrence costs when its product runs on wgmma
// from a shared-memory h, the structure docs/lstm_gpu.md names as the next one ("Where the limits
// are"), before any of the production kernel's features are rebuilt on it. bench/lstm_step times
// it beside the production kernel's steps and the bare grid barrier (rows "step floor: wgmma
// forward"); tests/gpu checks its arithmetic against the CPU.
//
// The problem: hidden H = 1024, batch 64, bf16, one thread block per group of 8 units (128 blocks,
// one per SM, a cooperative launch). Block g keeps the rows 32g … 32g+31 of Wt [4H, H] (row n:
// the gate column n, K contiguous) over the first K columns resident in shared memory (TMA boxes of
// [32, 64], 128-byte swizzle), and per step t:
//   P [64, 32] = h_t[:, :K] · Wt[32g … 32g+31, :K]ᵀ      (m64n32k16 wgmmas, both operands K-major)
//   i, f, o = σ(P[:, 0:8], P[:, 8:16], P[:, 24:32]), g = tanh(P[:, 16:24])
//   c = f·c + i·g (c0 = 0, f32 in registers), h_{t+1}[:, 8g … 8g+7] = o·tanh(c) (bf16)
// h_t comes from L2 in [64, 64] TMA boxes through a ring of kRing stages (a producer warp, full /
// empty mbarriers). The grid barrier is split: each block's consumers arrive (a global counter)
// once their slice of h_{t+1} is stored, and only the producer waits for a step's arrivals before
// it copies the next h; the consumers wait on the copies alone. No x·W_x input, no saved gates and
// cells, no backward: the floor of a forward step on this structure, against the production
// kernel's (mma.sync from a cp.async ring) 9.4-11.8 µs and the bare barrier's 1.1-1.4 µs.
//
// h [(T + 1)·64, H] bf16: rows 0 … 63 are h_0, step t writes rows (t + 1)·64 …. The same inputs give
// the same bits (each sum in a fixed order).
#include <cuda.h>

#include "core/cuda/check.cuh"
#include "core/cuda/runtime.h"
#include "kernels/common/cuda/bsmm_sm90_common.cuh"
#include "kernels/common/cuda/lstm_persistent.h"

namespace tessera {
namespace cuda {
namespace sm90 {
namespace {

constexpr int kFloorH = 1024;            // hidden units
constexpr int kFloorUnits = 8;           // units of a block
constexpr int kFloorN = 4 * kFloorUnits;  // product columns of a block
constexpr int kFloorThreads = 160;       // the consumer warpgroup, the producer warp
constexpr int kRing = 8;                 // h stages
constexpr int kHBox = 64 * 64 * 2;       // a [64, 64] bf16 box of h
constexpr int kWBox = kFloorN * 64 * 2;  // a [32, 64] bf16 box of Wt
constexpr int kMaxBoxes = kFloorH / 64;
constexpr int kFloorSmem = kMaxBoxes * kWBox + kRing * kHBox + 1024 + 1024;  // + barriers, + alignment

__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

// The grid barrier split in two: the consumers of every block arrive once their h_{t+1} is stored
// (a named barrier of the 128, then one thread's fence and atomic), and the producer alone waits
// for all arrivals of a step before it copies the next step's h. The consumers never wait on the
// grid: their next step waits on the copies.
__device__ __forceinline__ void wait_count(const unsigned* counter, unsigned target) {
  unsigned seen;
  do {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
  } while (seen < target);
}

__device__ __forceinline__ float floor_sigmoid(float v) { return __frcp_rn(1.f + __expf(-v)); }
__device__ __forceinline__ float floor_tanh(float v) { return 1.f - 2.f * __frcp_rn(1.f + __expf(2.f * v)); }

__global__ void __launch_bounds__(kFloorThreads, 1)
    wgmma_floor_kernel(const __grid_constant__ CUtensorMap map_h, const __grid_constant__ CUtensorMap map_w,
                       __nv_bfloat16* __restrict__ h, int steps, int boxes, unsigned* counter) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align1024(smem_raw);
  uint8_t* w_s = smem;                                   // boxes × [32, 64]
  uint8_t* ring = smem + kMaxBoxes * kWBox;              // kRing × [64, 64]
  uint64_t* full = reinterpret_cast<uint64_t*>(ring + kRing * kHBox);
  uint64_t* empty = full + kRing;
  uint64_t* w_bar = empty + kRing;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = blockIdx.x;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kRing; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 4);  // lane 0 of each consumer warp arrives
    }
    mbar_init(w_bar, 1);
    fence_barrier_init();
  }
  __syncthreads();
  if (warp == 4) {  // the producer: W once, then per step the boxes of h_t, after the grid's arrivals
    if (lane != 0) return;
    mbar_arrive_expect_tx(w_bar, boxes * kWBox);
    for (int k = 0; k < boxes; ++k) tma_load_2d(w_s + k * kWBox, &map_w, w_bar, k * 64, g * kFloorN);
    for (int t = 0, n = 0; t < steps; ++t, n += boxes) {
      if (t > 0) {
        wait_count(counter, static_cast<unsigned>(t) * gridDim.x);
        fence_proxy_async_global();  // the other blocks' stores of h_t (generic) before these TMA reads
      }
      for (int k = 0; k < boxes; ++k) {
        const int s = (n + k) % kRing;
        mbar_wait(&empty[s], (((n + k) / kRing) & 1) ^ 1);
        mbar_arrive_expect_tx(&full[s], kHBox);
        tma_load_2d(ring + s * kHBox, &map_h, &full[s], k * 64, t * 64);
      }
    }
    return;
  }
  const int wq = lane / 4, q = lane % 4;     // the accumulator layout of wgmma_sm90.cuh
  float c[2][2] = {{0.f, 0.f}, {0.f, 0.f}};  // rows 16·warp + wq + 8·hh, units 2q + e of this thread
  mbar_wait(w_bar, 0);
  for (int t = 0, n = 0; t < steps; ++t, n += boxes) {
    float acc[16];
#pragma unroll
    for (int e = 0; e < 16; ++e) acc[e] = 0.f;
    for (int k = 0; k < boxes; ++k) {
      const int s = (n + k) % kRing;
      mbar_wait(&full[s], ((n + k) / kRing) & 1);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        Wgmma<__nv_bfloat16, kFloorN>::run<0, 0>(acc, make_desc(ring + s * kHBox + kk * 32, 16, 1024, 128),
                                                 make_desc(w_s + k * kWBox + kk * 32, 16, 1024, 128), true);
      wgmma_commit();
      if (k > 0) {  // box k − 1's products are done: its stage goes back to the producer
        wgmma_wait<1>();
        fence_operands(acc);
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[(n + k - 1) % kRing]);
      }
    }
    wgmma_wait<0>();
    fence_operands(acc);
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[(n + boxes - 1) % kRing]);
    // acc[4j + 2hh + e]: row 16·warp + wq + 8hh, column 8j + 2q + e, i.e. gate j of unit 2q + e
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float out[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float ig = floor_sigmoid(acc[2 * hh + e]), fg = floor_sigmoid(acc[4 + 2 * hh + e]);
        const float gg = floor_tanh(acc[8 + 2 * hh + e]), og = floor_sigmoid(acc[12 + 2 * hh + e]);
        c[hh][e] = fg * c[hh][e] + ig * gg;
        out[e] = og * floor_tanh(c[hh][e]);
      }
      const int64_t row = static_cast<int64_t>(t + 1) * 64 + 16 * warp + wq + 8 * hh;
      *reinterpret_cast<__nv_bfloat162*>(h + row * kFloorH + g * kFloorUnits + 2 * q) =
          __floats2bfloat162_rn(out[0], out[1]);
    }
    fence_proxy_async_global();  // these generic stores before the other blocks' TMA reads of them
    named_barrier(1, 128);       // every consumer's stores of the step, then the block's arrival
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(counter, 1u);
    }
  }
#else
  __trap();  // compiled for another architecture: the host never launches this
#endif
}

}  // namespace
}  // namespace sm90

int wgmma_step_floor(const Tensor& h, const Tensor& wt, int64_t k_cols) {
  TS_CHECK(h.device().is_cuda() && wt.device().is_cuda(), ValueError, "wgmma step floor: h and wt must be on a GPU");
  TS_CHECK(h.dtype() == DType::bf16 && wt.dtype() == DType::bf16, ValueError, "wgmma step floor: bf16 only");
  TS_CHECK(h.dim() == 2 && h.size(1) == sm90::kFloorH && h.size(0) % 64 == 0 && h.size(0) >= 128, ShapeError,
           "wgmma step floor: h must be [(T + 1)·64, " << sm90::kFloorH << "], not " << h.shape());
  TS_CHECK(wt.dim() == 2 && wt.size(0) == 4 * sm90::kFloorH && wt.size(1) == sm90::kFloorH, ShapeError,
           "wgmma step floor: wt must be [" << 4 * sm90::kFloorH << ", " << sm90::kFloorH << "], not " << wt.shape());
  TS_CHECK(k_cols > 0 && k_cols % 64 == 0 && k_cols <= sm90::kFloorH, ValueError,
           "wgmma step floor: K must be a multiple of 64 up to " << sm90::kFloorH << ", not " << k_cols);
  const int device = h.device().index;
  TS_CHECK(sm90::device_ok(device), NotImplementedError, "wgmma step floor: compute capability 9.0 only");
  const int steps = static_cast<int>(h.size(0) / 64 - 1), grid = sm90::kFloorH / sm90::kFloorUnits;
  const CUtensorMap map_h = sm90::tensor_map(h.data_ptr(), DType::bf16, static_cast<uint64_t>(h.size(0)),
                                             sm90::kFloorH, 64, 64);
  const CUtensorMap map_w = sm90::tensor_map(wt.data_ptr(), DType::bf16, 4 * sm90::kFloorH, sm90::kFloorH,
                                             sm90::kFloorN, 64);
  const cudaStream_t stream = current_stream(h);
  unsigned* counter = static_cast<unsigned*>(allocate(256, device));
  TS_CUDA_CHECK(cudaMemsetAsync(counter, 0, 256, stream));
  TS_CUDA_CHECK(cudaFuncSetAttribute(sm90::wgmma_floor_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     sm90::kFloorSmem));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(sm90::kFloorThreads);
  cfg.dynamicSmemBytes = sm90::kFloorSmem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;  // every block resident at once: the grid barrier ends
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const cudaError_t launched = cudaLaunchKernelEx(&cfg, sm90::wgmma_floor_kernel, map_h, map_w,
                                                  static_cast<__nv_bfloat16*>(h.data_ptr()), steps,
                                                  static_cast<int>(k_cols / 64), counter);
  deallocate(counter, 256, device);  // stream-ordered: freed after the launch
  TS_CUDA_CHECK(launched);
  TS_CUDA_LAUNCH_CHECK("lstm wgmma step floor");
  return grid;
}

}  // namespace cuda
}  // namespace tessera
