// The dense LSTM recurrence's backward through time on wgmma (issue 16; compute capability 9.0,
// sm_90a): the production backward's inputs and outputs (lstm_persistent.h, recurrence_backward)
// for the layers lstm_wgmma_forward.cu takes (dense, hidden H ≤ 8 × the SMs, H a multiple of 64,
// batch B ≤ 64, bf16 or f16), optionally with the operand multicast over clusters of 2 or 4 blocks.
//
// One thread block per group of 8 units (grid H / 8, a cooperative launch). Block g keeps its
// units' rows of W_h [H, 4H] resident (rows 8g … 8g+7: the K-major B operand of dh = dpre·W_hᵀ, as
// W_h is stored; TMA boxes [8, 64], 128-byte swizzle). Phase ph = 0 … T walks the steps backwards,
// t = T − 1 − ph (phase T: dh0 only):
//   P [64, 8] = dpre_{t+1} · W_gᵀ     (m64n8k16 wgmmas over K = 4H; none at ph 0, where dpre_T = 0)
//   dh = (P + dy_t) (+ dh_T at ph 0),  tc = tanh(c_t),  dc = dc_carried + dh·o·(1 − tc²)
//   dpre_t = (dc·u·i·(1 − i), dc·c_{t−1}·f·(1 − f), dh·tc·o·(1 − o), dc·i·(1 − u²))   (stored in T)
//   dc_carried = dc·f (from dc_T; after t = 0 it is dc0);   phase T: dh0 = P
// with the gates (i, f, o, u) and cells c that the forward saved (f32) and c_{−1} = c0, in the
// production kernel's expression order. Each accumulator register holds one (row, unit): thread
// (warp w, lane 4·wq + q) owns rows 16w + wq (+ 8) and units 8g + 2q, 8g + 2q + 1. The operand
// dpre_{t+1} [B, 4H] comes by TMA from a 3-D map over dpre [T, B, 4H] (rows B … 63 zero fill) through
// a ring of kRing stages; every block needs all of it (64 KB a box row, 512 KB a step at H 1024), so
// with clusters (kCluster 2 or 4) each box is copied from L2 once per cluster and multicast into
// the same stage of every block (the ring protocol of lstm_wgmma_floor.cu: a stage's empty barrier
// counts the whole cluster's consumer warps). The split grid barrier of the forward orders the
// phases: the consumers arrive once their dpre_t is stored, the producers wait for every block's
// arrivals before copying it. Each sum has a fixed order: the same inputs give the same bits.
#include <cuda.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/cuda/check.cuh"
#include "core/cuda/runtime.h"
#include "kernels/common/cuda/bsmm_sm90_common.cuh"
#include "kernels/common/cuda/lstm_gate_math.cuh"
#include "kernels/common/cuda/lstm_persistent.h"
#include "kernels/common/cuda/lstm_wgmma_dense_cell.cuh"
#include "kernels/common/cuda/lstm_wgmma_dense_launch.cuh"
#include "kernels/common/cuda/lstm_wgmma_ring.cuh"

namespace tessera {
namespace cuda {
namespace sm90 {
namespace {

constexpr int kBwdUnits = 8;                  // hidden units of a block: the product's columns
constexpr int kBwdThreads = 160;              // the consumer warpgroup, the producer warp
constexpr int kBwdWBox = kBwdUnits * 64 * 2;  // a W box [8, 64]

std::atomic<uint64_t> g_bwd_launches{0};

template <class T, int kCluster>
__global__ void __launch_bounds__(kBwdThreads, 1)
    lstm_wgmma_backward_kernel(const __grid_constant__ CUtensorMap map_dpre, const __grid_constant__ CUtensorMap map_w,
                               const BackwardArgs p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  const int boxes = 4 * p.hidden / 64;                             // K = 4H
  const RingSmem m = carve_ring_smem(smem_raw, boxes * kBwdWBox);  // W: boxes × [8, 64]
  uint8_t *w_s = m.w, *ring = m.ring;
  uint64_t *full = m.full, *empty = m.empty, *w_bar = m.w_bar;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = blockIdx.x;
  const int rank = kCluster > 1 ? cluster_rank() : 0;
  init_ring_barriers<kCluster>(full, empty, w_bar);
  const int steps = p.steps;
  if (warp == 4) {  // the producer: W_g once, then per phase ph ≥ 1 the boxes of dpre_{T − ph}
    if (lane == 0) {
      mbar_arrive_expect_tx(w_bar, boxes * kBwdWBox);
      for (int k = 0; k < boxes; ++k) tma_load_2d(w_s + k * kBwdWBox, &map_w, w_bar, k * 64, g * kBwdUnits);
      for (int ph = 1, n = 0; ph <= steps; ++ph, n += boxes) {
        wait_count(p.counter, static_cast<unsigned>(ph) * gridDim.x);  // every block's dpre_{T − ph}
        fence_proxy_async_global();                                    // those generic stores before these TMA reads
        for (int k = 0; k < boxes; ++k) {
          const int s = (n + k) % kWgmmaRing;
          mbar_wait(&empty[s], (((n + k) / kWgmmaRing) & 1) ^ 1);  // free in every block of the cluster
          mbar_arrive_expect_tx(&full[s], kWgmmaABox);
          if constexpr (kCluster == 1) {
            tma_load_3d(ring + s * kWgmmaABox, &map_dpre, &full[s], k * 64, 0, steps - ph);
          } else if ((n + k) % kCluster == rank) {
            tma_load_3d_multicast(ring + s * kWgmmaABox, &map_dpre, &full[s], k * 64, 0, steps - ph,
                                  static_cast<uint16_t>((1u << kCluster) - 1));
          }
        }
      }
    }
    __syncwarp();
    if constexpr (kCluster > 1) cluster_meet();
    return;
  }

  // the consumers: rows 16·warp + lane / 4 (+ 8), units 8g + 2q (+ 1) (DenseGradCell)
  DenseGradCell<T> cell(p, g, warp, lane);
  mbar_wait(w_bar, 0);
  for (int ph = 0, n = 0; ph <= steps; ++ph) {
    const bool final_phase = ph == steps;
    typename DenseGradCell<T>::StepInputs in;
    cell.read_step(p, steps - 1 - ph, final_phase, in);
    float acc[kBwdUnits / 2] = {0.f, 0.f, 0.f, 0.f};
    if (ph > 0) {
      ring_product<T, kBwdUnits>(acc, ring, w_s, full, empty, n, boxes, lane, release_stage<kCluster>);
      n += boxes;
    }
    cell.finish_phase(p, ph, acc, in);
    if (final_phase) break;
    arrive_grid(p.counter);  // the step's outputs stored: the block's arrival
  }
  if constexpr (kCluster > 1) cluster_meet();  // no peer's copy or arrival is still on its way here
#else
  __trap();  // compiled for another architecture: the host never launches this
#endif
}

template <class T>
int resident(int device, size_t smem, int cluster) {
  switch (cluster) {
    case 1: return resident_blocks(lstm_wgmma_backward_kernel<T, 1>, device, kBwdThreads, smem, 1);
    case 2: return resident_blocks(lstm_wgmma_backward_kernel<T, 2>, device, kBwdThreads, smem, 2);
    case 4: return resident_blocks(lstm_wgmma_backward_kernel<T, 4>, device, kBwdThreads, smem, 4);
    default: return 0;
  }
}

template <class T, int kCluster>
void launch_backward(const Tensor& dy, const Tensor& dhT, const Tensor& dcT, const Tensor& gates, const Tensor& cells,
                     const Tensor& c0, const Tensor& wh, const Tensor& dpre, const Tensor& dh0, const Tensor& dc0) {
  const int device = dy.device().index;
  const int64_t hidden = dy.size(2);
  const cudaStream_t stream = current_stream(dpre);
  const size_t smem = wgmma_smem_bytes(hidden);
  const CUtensorMap map_dpre = dense_dpre_map(dpre);
  const CUtensorMap map_w =
      tensor_map(wh.data_ptr(), dy.dtype(), static_cast<uint64_t>(hidden), 4 * hidden, kBwdUnits, 64);
  const BackwardArgs a = dense_backward_args(dy, dhT, dcT, gates, cells, c0, dpre, dh0, dc0, stream);
  constexpr auto kernel = &lstm_wgmma_backward_kernel<T, kCluster>;
  TS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t cfg =
      wgmma_launch_config(static_cast<int>(hidden / kBwdUnits), kBwdThreads, smem, stream, kCluster, true, attrs);
  const cudaError_t launched = cudaLaunchKernelEx(&cfg, kernel, map_dpre, map_w, a);
  deallocate(a.counter, 256, device);  // stream-ordered: freed after the kernel
  TS_CUDA_CHECK(launched);
  TS_CUDA_LAUNCH_CHECK("lstm_recurrence_backward (wgmma)");
  g_bwd_launches.fetch_add(1, std::memory_order_relaxed);
}

template <class T>
void launch_backward_clustered(int cluster, const Tensor& dy, const Tensor& dhT, const Tensor& dcT, const Tensor& gates,
                               const Tensor& cells, const Tensor& c0, const Tensor& wh, const Tensor& dpre,
                               const Tensor& dh0, const Tensor& dc0) {
  switch (cluster) {
    case 1: return launch_backward<T, 1>(dy, dhT, dcT, gates, cells, c0, wh, dpre, dh0, dc0);
    case 2: return launch_backward<T, 2>(dy, dhT, dcT, gates, cells, c0, wh, dpre, dh0, dc0);
    case 4: return launch_backward<T, 4>(dy, dhT, dcT, gates, cells, c0, wh, dpre, dh0, dc0);
    default: TS_THROW(ValueError, "lstm_recurrence_backward (wgmma): clusters of 1, 2 or 4, not " << cluster);
  }
}

}  // namespace
}  // namespace sm90

namespace sm90 {
int backward_resident_blocks(int device, DType dtype, int64_t hidden, int cluster) {
  const size_t smem = wgmma_smem_bytes(hidden);
  return dtype == DType::bf16 ? resident<__nv_bfloat16>(device, smem, cluster)
                              : resident<__half>(device, smem, cluster);
}
}  // namespace sm90

void wgmma_backward(int cluster, const Tensor& dy, const Tensor& dhT, const Tensor& dcT, const Tensor& gates,
                    const Tensor& cells, const Tensor& c0, const Tensor& wh, const Tensor& dpre, const Tensor& dh0,
                    const Tensor& dc0) {
  if (dy.dtype() == DType::bf16) {
    sm90::launch_backward_clustered<__nv_bfloat16>(cluster, dy, dhT, dcT, gates, cells, c0, wh, dpre, dh0, dc0);
  } else {
    sm90::launch_backward_clustered<__half>(cluster, dy, dhT, dcT, gates, cells, c0, wh, dpre, dh0, dc0);
  }
}

uint64_t wgmma_backward_launch_count() { return sm90::g_bwd_launches.load(std::memory_order_relaxed); }

}  // namespace cuda
}  // namespace tessera
