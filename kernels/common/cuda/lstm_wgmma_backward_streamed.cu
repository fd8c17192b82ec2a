// The dense LSTM recurrence's backward on wgmma with W_h partly streamed from L2 (issue 16; compute
// capability 9.0, sm_90a; a lab kernel behind TESSERA_LSTM_WGMMA_STREAMED until it has run on a
// GPU): the twin of lstm_wgmma_forward_streamed.cu for lstm_wgmma_backward.cu, whose rows of W_h
// (K = 4H) pass shared memory at H 2048 (128 KB a group of 8 units, 256 groups on 132 SMs).
// The same inputs, outputs and arithmetic as that kernel (its file comment), with:
//
// One thread block per 16 units (grid H / 16, a cooperative launch), one consumer warpgroup per
// group of 8 (group g = 2b + w): the block's 16 rows of W_h are one TMA box [16, 64] per K box
// (128-byte swizzle, 2 KB; rows 8w … 8w + 7 warpgroup w's). The first `resident` K boxes stay in
// shared memory; per phase the producer copies, per K box k, the operand box [64, 64] of dpre_{t+1}
// into a ring stage and, for k ≥ resident, the block's W box beside it (10 KB stages, both
// warpgroups reading every stage):
//   P_w [64, 8] = Σ_k dpre_{t+1}[:, 64k …] · W_g[:, 64k …]ᵀ     (m64n8k16 wgmmas)
// then each warpgroup's epilogue (DenseGradCell), one arrival per block on the split grid barrier.
// Per phase the block reads all of dpre_{t+1} (1 MB at H 2048) and its streamed W boxes from L2.
// Each sum has a fixed order: the same inputs give the same bits.
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <string>

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

constexpr int kSbUnits = 16;                 // a block's units: two groups of 8
constexpr int kSbThreads = 288;              // two consumer warpgroups, the producer warp
constexpr int kSbStages = 8;                 // ring stages
constexpr int kSbABox = 64 * 64 * 2;         // an operand box [64, 64] of dpre
constexpr int kSbWBox = kSbUnits * 64 * 2;   // a W box [16 rows, 64 K]
constexpr int kSbStage = kSbABox + 2048;     // a stage: the dpre box, then (streamed) the W box, 1 KB-aligned
constexpr int kSbHalf = 8 * 128;             // a warpgroup's 8 rows of a W box
constexpr int kSbMaxBatch = 64;

size_t streamed_bwd_smem_bytes(int resident) {
  return static_cast<size_t>(resident) * kSbWBox + kSbStages * kSbStage + 2048;
}

std::atomic<uint64_t> g_streamed_bwd_launches{0};

template <class T>
__global__ void __launch_bounds__(kSbThreads, 1)
    lstm_wgmma_backward_streamed_kernel(const __grid_constant__ CUtensorMap map_dpre,
                                        const __grid_constant__ CUtensorMap map_w, const BackwardArgs p,
                                        int resident) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  const int boxes = 4 * p.hidden / 64;  // K = 4H
  const RingSmem m = carve_ring_smem(smem_raw, resident * kSbWBox, kSbStage, kSbStages);
  uint8_t *w_s = m.w, *ring = m.ring;
  uint64_t *full = m.full, *empty = m.empty, *w_bar = m.w_bar;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = warp / 4, b = blockIdx.x;
  init_ring_barriers<1, kSbStages, 8>(full, empty, w_bar);  // both warpgroups read every stage
  const int steps = p.steps;
  if (warp == 8) {  // the producer: the resident W boxes once, then per phase ph ≥ 1 dpre_{T − ph}'s boxes
    if (lane == 0) {
      mbar_arrive_expect_tx(w_bar, resident * kSbWBox);
      for (int k = 0; k < resident; ++k) tma_load_2d(w_s + k * kSbWBox, &map_w, w_bar, k * 64, b * kSbUnits);
      for (int ph = 1, n = 0; ph <= steps; ++ph, n += boxes) {
        wait_count(p.counter, static_cast<unsigned>(ph) * gridDim.x);  // every block's dpre_{T − ph}
        fence_proxy_async_global();                                    // those generic stores before these TMA reads
        for (int k = 0; k < boxes; ++k) {
          const int s = (n + k) % kSbStages;
          const bool streamed = k >= resident;
          uint8_t* stage = ring + s * kSbStage;
          mbar_wait(&empty[s], (((n + k) / kSbStages) & 1) ^ 1);
          mbar_arrive_expect_tx(&full[s], streamed ? kSbABox + kSbWBox : kSbABox);
          tma_load_3d(stage, &map_dpre, &full[s], k * 64, 0, steps - ph);
          if (streamed) tma_load_2d(stage + kSbABox, &map_w, &full[s], k * 64, b * kSbUnits);
        }
      }
    }
    return;
  }

  // the consumers: warpgroup wg takes group g = 2b + wg (DenseGradCell: its rows and units)
  DenseGradCell<T> cell(p, 2 * b + wg, warp % 4, lane);
  mbar_wait(w_bar, 0);
  for (int ph = 0, n = 0; ph <= steps; ++ph) {
    typename DenseGradCell<T>::StepInputs in;
    cell.read_step(p, steps - 1 - ph, ph == steps, in);
    float acc[4] = {0.f, 0.f, 0.f, 0.f};  // [64, 8]: acc[2hh + e] = row rows[hh], unit u + e
    if (ph > 0) {
      auto w_of = [&](int k, uint8_t* stage) {  // this warpgroup's 8 rows of W box k
        return (k < resident ? w_s + k * kSbWBox : stage + kSbABox) + wg * kSbHalf;
      };
      ring_product_staged<T, 8, kSbStages, kSbStage>(acc, ring, full, empty, n, boxes, lane, w_of);
      n += boxes;
    }
    cell.finish_phase(p, ph, acc, in);
    if (ph == steps) break;
    arrive_grid<2>(p.counter);  // the phase's dpre_t stored: the block's arrival
  }
#else
  __trap();  // compiled for another architecture: the host never launches this
#endif
}

// The K boxes to keep resident at `hidden` (the rest streamed), within the cap and shared memory.
int resident_bwd_boxes(int device, int64_t hidden, int cap) {
  return resident_w_boxes(device, static_cast<int>(4 * hidden / 64), cap, streamed_bwd_smem_bytes(0), kSbWBox);
}

template <class T>
void launch_streamed_backward(const Tensor& dy, const Tensor& dhT, const Tensor& dcT, const Tensor& gates,
                              const Tensor& cells, const Tensor& c0, const Tensor& wh, const Tensor& dpre,
                              const Tensor& dh0, const Tensor& dc0) {
  const int device = dy.device().index;
  const int64_t hidden = dy.size(2);
  const cudaStream_t stream = current_stream(dpre);
  const int resident = resident_bwd_boxes(device, hidden, streamed_choice());
  const size_t smem = streamed_bwd_smem_bytes(resident);
  const CUtensorMap map_dpre = dense_dpre_map(dpre);
  const CUtensorMap map_w =
      tensor_map(wh.data_ptr(), dy.dtype(), static_cast<uint64_t>(hidden), 4 * hidden, kSbUnits, 64);
  const BackwardArgs a = dense_backward_args(dy, dhT, dcT, gates, cells, c0, dpre, dh0, dc0, stream);
  constexpr auto kernel = &lstm_wgmma_backward_streamed_kernel<T>;
  TS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t cfg =
      wgmma_launch_config(static_cast<int>(hidden / kSbUnits), kSbThreads, smem, stream, 1, true, attrs);
  const cudaError_t launched = cudaLaunchKernelEx(&cfg, kernel, map_dpre, map_w, a, resident);
  deallocate(a.counter, 256, device);  // stream-ordered: freed after the kernel
  TS_CUDA_CHECK(launched);
  TS_CUDA_LAUNCH_CHECK("lstm_recurrence_backward (wgmma, W streamed)");
  g_streamed_bwd_launches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace
}  // namespace sm90

std::string wgmma_streamed_backward_unfit(int device, DType dtype, int64_t batch, int64_t hidden,
                                          const LayoutPtr& layout) {
  const int cap = sm90::streamed_choice();
  if (cap < 0) return "off (TESSERA_LSTM_WGMMA_STREAMED)";
  if (layout) return "dense layers only";
  if (dtype != DType::bf16 && dtype != DType::f16) return "bf16 or f16 only";
  if (batch < 1 || batch > sm90::kSbMaxBatch) return "batch 1 to 64 only";
  if (hidden < 64 || hidden % 64 != 0) return "hidden a multiple of 64 only";
  if (!sm90::device_ok(device)) return "compute capability 9.0 only";
  const size_t smem = sm90::streamed_bwd_smem_bytes(sm90::resident_bwd_boxes(device, hidden, cap));
  const int resident = dtype == DType::bf16
                           ? sm90::resident_blocks(sm90::lstm_wgmma_backward_streamed_kernel<__nv_bfloat16>, device,
                                                   sm90::kSbThreads, smem, 1)
                           : sm90::resident_blocks(sm90::lstm_wgmma_backward_streamed_kernel<__half>, device,
                                                   sm90::kSbThreads, smem, 1);
  if (resident < hidden / sm90::kSbUnits) return "more blocks of 16 units than resident blocks";
  return "";
}

void wgmma_streamed_backward(const Tensor& dy, const Tensor& dhT, const Tensor& dcT, const Tensor& gates,
                             const Tensor& cells, const Tensor& c0, const Tensor& wh, const Tensor& dpre,
                             const Tensor& dh0, const Tensor& dc0) {
  if (wgmma_split_backward_asked() &&
      wgmma_split_backward_unfit(dy.device().index, dy.dtype(), dy.size(1), dy.size(2)).empty())
    return wgmma_split_backward(dy, dhT, dcT, gates, cells, c0, wh, dpre, dh0, dc0);
  if (dy.dtype() == DType::bf16) {
    sm90::launch_streamed_backward<__nv_bfloat16>(dy, dhT, dcT, gates, cells, c0, wh, dpre, dh0, dc0);
  } else {
    sm90::launch_streamed_backward<__half>(dy, dhT, dcT, gates, cells, c0, wh, dpre, dh0, dc0);
  }
}

uint64_t wgmma_streamed_backward_launch_count() {
  return sm90::g_streamed_bwd_launches.load(std::memory_order_relaxed);
}

}  // namespace cuda
}  // namespace tessera
