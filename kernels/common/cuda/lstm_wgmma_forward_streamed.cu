// The dense LSTM recurrence's forward on wgmma with W_h partly streamed from L2 (issue 16; compute
// capability 9.0, sm_90a; a lab kernel behind TESSERA_LSTM_WGMMA_STREAMED until it has run on a
// GPU): for dense layers whose W_h passes the SMs' shared memory (H 2048: 32 MB against 132 ×
// 227 KB), which lstm_wgmma_forward.cu (W resident, one group of 8 units a block) cannot take.
// The same inputs, outputs and arithmetic as that kernel (its file comment), with:
//
// One thread block per 16 units (grid H / 16, a cooperative launch), one consumer warpgroup per
// group of 8 (group g = 2b + w, warpgroup w of block b): the block's 64 rows of the permuted
// transpose wt [4H, H] (lstm_wgmma_dense_launch.cuh) are one TMA box [64, 64] per K box (128-byte
// swizzle), rows 32w … 32w + 31 warpgroup w's. The first `resident` K boxes stay in shared memory
// for all T steps; each step the producer warp copies, per K box k, the operand box [64, 64] of
// h_t into a ring stage and, for k ≥ resident, the block's W box beside it (16 KB stages, both
// warpgroups reading every stage):
//   P_w [64, 32] = Σ_k h_t[:, 64k …] · W_g[:, 64k …]ᵀ     (m64n32k16 wgmmas, f32 accumulators)
// then each warpgroup's epilogue for its 8 units as in lstm_wgmma_forward.cu, one arrival per block
// on the split grid barrier once both have stored. Per step the block reads all of h_t and its
// streamed W boxes from L2 (H 2048, 16 resident of 32: 256 KB + 128 KB). Each sum has a fixed
// order: the same inputs give the same bits.
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
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

constexpr int kStUnits = 16;               // a block's units: two groups of 8
constexpr int kStRows = 4 * kStUnits;      // its rows of wt: 64, 32 a warpgroup
constexpr int kStThreads = 288;            // two consumer warpgroups, the producer warp
constexpr int kStStages = 6;               // ring stages
constexpr int kStBox = 64 * 64 * 2;        // an operand box [64, 64], or a W box [64 rows, 64 K]
constexpr int kStStage = 2 * kStBox;       // a stage: the h box, then (streamed K boxes) the W box
constexpr int kStHalf = 32 * 128;          // a warpgroup's 32 rows of a W box
constexpr int kStMaxBatch = 64;

size_t streamed_smem_bytes(int resident) {
  return static_cast<size_t>(resident) * kStBox + kStStages * kStStage + 2048;
}

std::atomic<uint64_t> g_streamed_launches{0};

template <class T>
__global__ void __launch_bounds__(kStThreads, 1)
    lstm_wgmma_forward_streamed_kernel(const __grid_constant__ CUtensorMap map_h0,
                                       const __grid_constant__ CUtensorMap map_y,
                                       const __grid_constant__ CUtensorMap map_w, const ForwardArgs p,
                                       int resident) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  const int boxes = p.hidden / 64;
  const RingSmem m = carve_ring_smem(smem_raw, resident * kStBox, kStStage, kStStages);
  uint8_t *w_s = m.w, *ring = m.ring;
  uint64_t *full = m.full, *empty = m.empty, *w_bar = m.w_bar;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = warp / 4, b = blockIdx.x;
  init_ring_barriers<1, kStStages, 8>(full, empty, w_bar);  // both warpgroups read every stage
  if (warp == 8) {  // the producer: the resident W boxes once, then per step h_t's boxes (and W's streamed ones)
    if (lane == 0) {
      mbar_arrive_expect_tx(w_bar, resident * kStBox);
      for (int k = 0; k < resident; ++k) tma_load_2d(w_s + k * kStBox, &map_w, w_bar, k * 64, b * kStRows);
      for (int t = 0, n = 0; t < p.steps; ++t, n += boxes) {
        if (t > 0) {
          wait_count(p.counter, static_cast<unsigned>(t) * gridDim.x);
          fence_proxy_async_global();  // the other blocks' stores of y[t − 1] (generic) before these TMA reads
        }
        for (int k = 0; k < boxes; ++k) {
          const int s = (n + k) % kStStages;
          const bool streamed = k >= resident;
          uint8_t* stage = ring + s * kStStage;
          mbar_wait(&empty[s], (((n + k) / kStStages) & 1) ^ 1);
          mbar_arrive_expect_tx(&full[s], streamed ? kStStage : kStBox);
          if (t == 0) {
            tma_load_2d(stage, &map_h0, &full[s], k * 64, 0);
          } else {
            tma_load_3d(stage, &map_y, &full[s], k * 64, 0, t - 1);
          }
          if (streamed) tma_load_2d(stage + kStBox, &map_w, &full[s], k * 64, b * kStRows);
        }
      }
    }
    return;
  }

  // the consumers: warpgroup wg takes group g = 2b + wg (DenseCell: its rows and units)
  DenseCell<T> cell(p, 2 * b + wg, warp % 4, lane);
  mbar_wait(w_bar, 0);
  for (int t = 0, n = 0; t < p.steps; ++t, n += boxes) {
    float gx[2][4][2];
    cell.input_term(p, t, gx);
    float acc[16];  // [64, 32]: acc[4j + 2hh + e] = row rows[hh], gate j of unit u + e
    auto w_of = [&](int k, uint8_t* stage) {  // this warpgroup's 32 rows of W box k
      return (k < resident ? w_s + k * kStBox : stage + kStBox) + wg * kStHalf;
    };
    ring_product_staged<T, 32, kStStages, kStStage>(acc, ring, full, empty, n, boxes, lane, w_of);
    cell.finish_step(p, t, acc, gx);
    arrive_grid<2>(p.counter);  // the step's outputs stored: the block's arrival
  }
#else
  __trap();  // compiled for another architecture: the host never launches this
#endif
}


// The K boxes to keep resident at `hidden` (the rest streamed), within the cap and shared memory.
int resident_boxes(int device, int64_t hidden, int cap) {
  return resident_w_boxes(device, static_cast<int>(hidden / 64), cap, streamed_smem_bytes(0), kStBox);
}

template <class T>
void launch_streamed(const Tensor& gx, const Tensor& h0, const Tensor& c0, const Tensor& wh, const Tensor& bias,
                     double forget_bias, const Tensor& y, const Tensor& hT, const Tensor& cT, const Tensor& gates,
                     const Tensor& cells) {
  const int device = gx.device().index;
  const int64_t hidden = h0.size(1);
  const cudaStream_t stream = current_stream(y);
  const int resident = resident_boxes(device, hidden, streamed_choice());
  const size_t smem = streamed_smem_bytes(resident);
  DenseForwardLaunch<T> l(gx, h0, c0, wh, bias, forget_bias, y, hT, cT, gates, cells, kStRows, stream);
  constexpr auto kernel = &lstm_wgmma_forward_streamed_kernel<T>;
  TS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t cfg =
      wgmma_launch_config(static_cast<int>(hidden / kStUnits), kStThreads, smem, stream, 1, true, attrs);
  const cudaError_t launched = cudaLaunchKernelEx(&cfg, kernel, l.map_h0, l.map_y, l.map_w, l.args, resident);
  l.release();  // stream-ordered: freed after the kernel
  TS_CUDA_CHECK(launched);
  TS_CUDA_LAUNCH_CHECK("lstm_recurrence (wgmma, W streamed)");
  g_streamed_launches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

int streamed_choice() {
  const char* e = std::getenv("TESSERA_LSTM_WGMMA_STREAMED");
  const std::string v = e ? e : "auto";
  if (v == "0") return -1;
  if (v == "1" || v == "auto") return 1 << 20;
  const bool capped = v.size() > 2 && v.compare(0, 2, "1:") == 0 &&
                      v.find_first_not_of("0123456789", 2) == std::string::npos && v.size() <= 6;
  TS_CHECK(capped, ValueError, "TESSERA_LSTM_WGMMA_STREAMED must be auto, 0, 1 or 1:N, not '" << v << "'");
  return std::stoi(v.substr(2));
}
}  // namespace sm90

bool wgmma_streamed_first() {
  const int cap = sm90::streamed_choice();  // (the check of the value)
  const char* e = std::getenv("TESSERA_LSTM_WGMMA_STREAMED");
  return cap >= 0 && e && std::string(e) != "auto";
}

std::string wgmma_streamed_forward_unfit(int device, DType dtype, int64_t batch, int64_t hidden,
                                         const LayoutPtr& layout) {
  const int cap = sm90::streamed_choice();
  if (cap < 0) return "off (TESSERA_LSTM_WGMMA_STREAMED)";
  if (layout) return "dense layers only";
  if (dtype != DType::bf16 && dtype != DType::f16) return "bf16 or f16 only";
  if (batch < 1 || batch > sm90::kStMaxBatch) return "batch 1 to 64 only";
  if (hidden < 64 || hidden % 64 != 0) return "hidden a multiple of 64 only";
  if (!sm90::device_ok(device)) return "compute capability 9.0 only";
  const size_t smem = sm90::streamed_smem_bytes(sm90::resident_boxes(device, hidden, cap));
  const int resident = dtype == DType::bf16
                           ? sm90::resident_blocks(sm90::lstm_wgmma_forward_streamed_kernel<__nv_bfloat16>, device,
                                                   sm90::kStThreads, smem, 1)
                           : sm90::resident_blocks(sm90::lstm_wgmma_forward_streamed_kernel<__half>, device,
                                                   sm90::kStThreads, smem, 1);
  if (resident < hidden / sm90::kStUnits) return "more blocks of 16 units than resident blocks";
  return "";
}

void wgmma_streamed_forward(const Tensor& gx, const Tensor& h0, const Tensor& c0, const Tensor& wh,
                            const Tensor& bias, double forget_bias, const Tensor& y, const Tensor& hT,
                            const Tensor& cT, const Tensor& gates, const Tensor& cells) {
  if (gx.dtype() == DType::bf16) {
    sm90::launch_streamed<__nv_bfloat16>(gx, h0, c0, wh, bias, forget_bias, y, hT, cT, gates, cells);
  } else {
    sm90::launch_streamed<__half>(gx, h0, c0, wh, bias, forget_bias, y, hT, cT, gates, cells);
  }
}

uint64_t wgmma_streamed_forward_launch_count() {
  return sm90::g_streamed_launches.load(std::memory_order_relaxed);
}

}  // namespace cuda
}  // namespace tessera
