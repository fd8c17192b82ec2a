// The dense LSTM recurrence's backward on wgmma with W_h partly streamed from L2 and K split over
// a pair of blocks (issue 16; compute capability 9.0, sm_90a): the twin of
// lstm_wgmma_forward_streamed.cu for lstm_wgmma_backward.cu, whose rows of W_h (K = 4H) pass shared
// memory at H 2048. The same inputs, outputs and arithmetic as that kernel (its file comment).
//
// A block per 16 units reading all of dpre_{t+1} [64, 4H] every phase (1 MB at H 2048, 128 MB a
// phase over 128 blocks, from L2) made the first form of this kernel L2-bound; here each block reads
// half of it, and the two halves' partial products meet in distributed shared memory. On the H100
// (2026-12-06) the dense H 2048 layer step went from 13.30 ms (the first form, since deleted) to
// 9.61 (cuDNN's 11.41): 14.4 µs less a backward step.
//
// One cluster of two blocks per 32 units (grid H / 16, clusters of 2, a cooperative launch). Block
// rank r of cluster c reads K half r of dpre (columns r·2H … (r + 1)·2H, `boxes` = H / 32 boxes of
// 64) and the W_h rows of the cluster's units 32c … 32c + 31 as [32, 64] boxes (128-byte swizzle,
// 4 KB; the first `resident` stay in shared memory, the rest are copied beside dpre's boxes).
// Consumer warpgroup w of block r computes the partial product of the cluster's units 16w … 16w + 15
// over half r:
//   P_rw [64, 16] = Σ_{k in half r} dpre_{t+1}[:, 64k …] · W_h[32c + 16w …, 64k …]ᵀ   (m64n16k16)
// and hands it to block w of the cluster (itself if w = r, else the other block, through
// distributed shared memory), into that block's slot for half r. Block r then holds both halves of
// its units 32c + 16r … = 16·blockIdx + 0 … 15, and its warpgroup v finishes group 2·blockIdx + v
// (DenseGradCell) from P = P_half0 + P_half1 (chunk v of the m64n16 accumulators: the m64n8 layout).
//
// The hand-over buffer of a phase is not rewritten before it was read: the next phase's products
// wait for dpre boxes that exist only after every block's arrival for this phase, which each block
// makes after reading it. Each sum has a fixed order (each half's boxes in order, then half 0 +
// half 1): the same inputs give the same bits.
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

constexpr int kSkUnits = 32;                 // a cluster's units: each warpgroup's partial covers 16
constexpr int kSkThreads = 288;              // two consumer warpgroups, the producer warp
constexpr int kSkStages = 8;                 // ring stages
constexpr int kSkABox = 64 * 64 * 2;         // an operand box [64, 64] of dpre
constexpr int kSkWBox = kSkUnits * 64 * 2;   // a W box [32 rows, 64 K]
constexpr int kSkStage = kSkABox + kSkWBox;  // a stage: the dpre box, then (streamed) the W box
constexpr int kSkHalf = 16 * 128;            // a warpgroup's 16 rows of a W box
constexpr int kSkHandBytes = 2 * 2 * 128 * 16;  // [2 halves][2 chunks of 8 units][128 threads] float4
constexpr int kSkMaxBatch = 64;

size_t streamed_bwd_smem_bytes(int resident) {
  return static_cast<size_t>(resident) * kSkWBox + kSkStages * kSkStage + kSkHandBytes + 2048;
}

std::atomic<uint64_t> g_streamed_bwd_launches{0};

// The distributed shared memory hand-over: a store of a float4 at `p`'s offset in block `rank`'s
// shared memory, an arrival there (release at cluster scope: this thread's stores before it), and
// the wait that acquires at cluster scope (the other block's stores are seen after it).
__device__ __forceinline__ void st_cluster_f4(float4* p, int rank, float4 v) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_addr(p)), "r"(rank));
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(remote), "f"(v.x), "f"(v.y), "f"(v.z),
               "f"(v.w)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive_release_cluster(uint64_t* bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait_acquire_cluster(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  }
}

template <class T>
__global__ void __launch_bounds__(kSkThreads, 1)
    lstm_wgmma_backward_streamed_kernel(const __grid_constant__ CUtensorMap map_dpre,
                                     const __grid_constant__ CUtensorMap map_w, const BackwardArgs p, int resident) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  const int boxes = p.hidden / 32;  // a K half's boxes: 2H / 64
  // the resident W boxes, the hand-over buffer (8 KB, keeping the ring 1024-aligned), the ring
  const RingSmem m = carve_ring_smem(smem_raw, resident * kSkWBox + kSkHandBytes, kSkStage, kSkStages);
  uint8_t *w_s = m.w, *ring = m.ring;
  uint64_t *full = m.full, *empty = m.empty, *w_bar = m.w_bar;
  uint64_t* hand_full = w_bar + 1;  // the hand-over's arrivals: this block's warpgroup r and the other block's
  // hand[h][j][i]: half h's partial of chunk j (units 8j … 8j + 7 of this block's 16) of consumer thread i
  float4* hand = reinterpret_cast<float4*>(w_s + resident * kSkWBox);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = warp / 4, b = blockIdx.x;
  const int rank = cluster_rank(), cluster = b / 2;
  if (threadIdx.x == 0) mbar_init(hand_full, 256);
  init_ring_barriers<1, kSkStages, 8>(full, empty, w_bar);  // both warpgroups read every stage
  cluster_meet();  // the other block's hand-over barrier exists before this block arrives on it
  const int steps = p.steps;
  if (warp == 8) {  // the producer: the resident W boxes once, then per phase ph ≥ 1 half r of dpre_{T − ph}
    if (lane == 0) {
      const int k0 = rank * boxes;  // the half's first box of 4H / 64
      mbar_arrive_expect_tx(w_bar, resident * kSkWBox);
      for (int k = 0; k < resident; ++k)
        tma_load_2d(w_s + k * kSkWBox, &map_w, w_bar, (k0 + k) * 64, cluster * kSkUnits);
      for (int ph = 1, n = 0; ph <= steps; ++ph, n += boxes) {
        wait_count(p.counter, static_cast<unsigned>(ph) * gridDim.x);  // every block's dpre_{T − ph}
        fence_proxy_async_global();                                    // those generic stores before these TMA reads
        for (int k = 0; k < boxes; ++k) {
          const int s = (n + k) % kSkStages;
          const bool streamed = k >= resident;
          uint8_t* stage = ring + s * kSkStage;
          mbar_wait(&empty[s], (((n + k) / kSkStages) & 1) ^ 1);
          mbar_arrive_expect_tx(&full[s], streamed ? kSkStage : kSkABox);
          tma_load_3d(stage, &map_dpre, &full[s], (k0 + k) * 64, 0, steps - ph);
          if (streamed) tma_load_2d(stage + kSkABox, &map_w, &full[s], (k0 + k) * 64, cluster * kSkUnits);
        }
      }
    }
    __syncwarp();
    cluster_meet();
    return;
  }

  // the consumers: warpgroup wg's partial for the cluster's units 16·wg …; then group 2b + wg's cell
  const int i = threadIdx.x % 128;
  DenseGradCell<T> cell(p, 2 * b + wg, warp % 4, lane);
  mbar_wait(w_bar, 0);
  for (int ph = 0, n = 0; ph <= steps; ++ph) {
    typename DenseGradCell<T>::StepInputs in;
    cell.read_step(p, steps - 1 - ph, ph == steps, in);
    float acc[4] = {0.f, 0.f, 0.f, 0.f};  // [64, 8]: acc[2hh + e] = row rows[hh], unit u + e
    if (ph > 0) {
      float part[8];  // [64, 16]: part[4j + 2hh + e] = row rows[hh], unit 8j + 2q + e of the 16
      auto w_of = [&](int k, uint8_t* stage) {  // this warpgroup's 16 rows of W box k
        return (k < resident ? w_s + k * kSkWBox : stage + kSkABox) + wg * kSkHalf;
      };
      ring_product_staged<T, 16, kSkStages, kSkStage>(part, ring, full, empty, n, boxes, lane, w_of);
      n += boxes;
      // to block wg of the cluster, its slot for this block's half
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float4 v = make_float4(part[4 * j], part[4 * j + 1], part[4 * j + 2], part[4 * j + 3]);
        float4* dst = hand + (rank * 2 + j) * 128 + i;
        if (wg == rank) {
          *dst = v;
        } else {
          st_cluster_f4(dst, wg, v);
        }
      }
      if (wg == rank) {
        mbar_arrive_release_cluster(hand_full);
      } else {
        mbar_arrive_cluster(hand_full, wg);
      }
      mbar_wait_acquire_cluster(hand_full, (ph - 1) & 1);
      const float4 h0 = hand[wg * 128 + i], h1 = hand[(2 + wg) * 128 + i];  // chunk wg of half 0, of half 1
      acc[0] = h0.x + h1.x;
      acc[1] = h0.y + h1.y;
      acc[2] = h0.z + h1.z;
      acc[3] = h0.w + h1.w;
    }
    cell.finish_phase(p, ph, acc, in);
    if (ph == steps) break;
    arrive_grid<2>(p.counter);  // the phase's dpre_t stored: the block's arrival
  }
  cluster_meet();  // no arrival of the other block is still on its way here
#else
  __trap();  // compiled for another architecture: the host never launches this
#endif
}

// The W boxes of a K half to keep resident at `hidden` (the rest streamed), within the cap and shared memory.
int resident_bwd_boxes(int device, int64_t hidden, int cap) {
  return resident_w_boxes(device, static_cast<int>(hidden / 32), cap, streamed_bwd_smem_bytes(0), kSkWBox);
}

template <class T>
int streamed_resident_blocks(int device, size_t smem) {
  return resident_blocks(lstm_wgmma_backward_streamed_kernel<T>, device, kSkThreads, smem, 2);
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
      tensor_map(wh.data_ptr(), dy.dtype(), static_cast<uint64_t>(hidden), 4 * hidden, kSkUnits, 64);
  const BackwardArgs a = dense_backward_args(dy, dhT, dcT, gates, cells, c0, dpre, dh0, dc0, stream);
  constexpr auto kernel = &lstm_wgmma_backward_streamed_kernel<T>;
  TS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t cfg = wgmma_launch_config(static_cast<int>(hidden / 16), kSkThreads, smem, stream, 2, true,
                                                     attrs);
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
  if (batch < 1 || batch > sm90::kSkMaxBatch) return "batch 1 to 64 only";
  if (hidden < 64 || hidden % 64 != 0) return "hidden a multiple of 64 only";
  if (!sm90::device_ok(device)) return "compute capability 9.0 only";
  const size_t smem = sm90::streamed_bwd_smem_bytes(sm90::resident_bwd_boxes(device, hidden, cap));
  const int resident = dtype == DType::bf16 ? sm90::streamed_resident_blocks<__nv_bfloat16>(device, smem)
                                            : sm90::streamed_resident_blocks<__half>(device, smem);
  if (resident < hidden / 16) return "more blocks of 16 units than resident blocks in clusters of 2";
  return "";
}

void wgmma_streamed_backward(const Tensor& dy, const Tensor& dhT, const Tensor& dcT, const Tensor& gates,
                             const Tensor& cells, const Tensor& c0, const Tensor& wh, const Tensor& dpre,
                             const Tensor& dh0, const Tensor& dc0) {
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
