// The dense LSTM recurrence's forward on wgmma (issue 16; compute capability 9.0, sm_90a): the
// structure the step floor (lstm_wgmma_floor.cu) measured at 0.55x the production kernel's step,
// with the production kernel's inputs and outputs (lstm_persistent.h, recurrence_forward), for
// dense layers of hidden H ≤ 8 × the SMs (H a multiple of 64), batch B ≤ 64, bf16 or f16.
//
// One thread block per group of 8 units (grid H / 8, one per SM, a cooperative launch). Block g
// keeps W_g, the 32 columns of W_h [H, 4H] that feed its units' gates, resident in shared memory
// as wt rows 32g … 32g+31 of the permuted transpose made once per call:
//   wt [4H, H],  wt[32g + 8j + e][k] = W_h[k][j·H + 8g + e]   (gate j in nn::LSTM's order i, f, o, u)
// in TMA boxes of [32, 64] with the 128-byte swizzle. Per step t a producer warp brings the step's
// operand h_t [B, H] (h0, then y[t − 1]) in [64, 64] boxes through a ring of kRing stages (rows
// B … 63 are the boxes' zero fill), and the consumer warpgroup multiplies:
//   P [64, 32] = h_t · W_gᵀ        (m64n32k16 wgmmas, both operands K-major, f32 accumulators)
//   pre_j = (P[:, 8j + e] + gx[t][:, j·H + 8g + e]) + (bias[j·H + 8g + e] (+ forget_bias, j = f))
//   i, f, o = σ(pre_i, pre_f, pre_o), u = tanh(pre_u), c = f·c + i·u, h = o·tanh(c)
// with c in registers across the steps (from c0), and stores y[t] = h (T), cells[t] = c and
// gates[t] = (i, f, o, u) (f32, what the backward reads), hT and cT after the last step. Each
// accumulator register holds one (row, gate, unit): thread (warp w, lane 4·wq + q) owns rows
// 16w + wq (+ 8) and units 8g + 2q, 8g + 2q + 1 of all four gates, so the cell update needs no
// exchange. The grid barrier between steps is split as in the floor: the consumers arrive (a
// global counter) once their h_{t+1} is stored, and only the producer waits for all arrivals
// before it copies the next operand. Every block reads all of h_t (128 KB a step at H 1024): with
// clusters (kCluster 2 or 4) each box is copied from L2 once per cluster and multicast into the
// same stage of every block (lstm_wgmma_floor.cu's protocol). Each sum has a fixed order: the same
// inputs give the same bits on every run.
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

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

constexpr int kUnits = 8;              // hidden units of a block
constexpr int kCols = 4 * kUnits;      // the block's product columns: 4 gates × 8 units
constexpr int kFwdThreads = 160;       // the consumer warpgroup, the producer warp
constexpr int kRing = kWgmmaRing;      // operand stages
constexpr int kABox = kWgmmaABox;      // an operand box [64 rows, 64 K] of 2-byte elements
constexpr int kWBox = kCols * 64 * 2;  // a W box [32, 64]
constexpr int kMaxBatch = 64;          // one m64 tile of rows

std::atomic<uint64_t> g_fwd_launches{0};

template <class T, int kCluster>
__global__ void __launch_bounds__(kFwdThreads, 1)
    lstm_wgmma_forward_kernel(const __grid_constant__ CUtensorMap map_h0, const __grid_constant__ CUtensorMap map_y,
                              const __grid_constant__ CUtensorMap map_w, const ForwardArgs p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  const int boxes = p.hidden / 64;
  const RingSmem m = carve_ring_smem(smem_raw, boxes * kWBox);  // W: boxes × [32, 64]
  uint8_t *w_s = m.w, *ring = m.ring;
  uint64_t *full = m.full, *empty = m.empty, *w_bar = m.w_bar;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = blockIdx.x;
  const int rank = kCluster > 1 ? cluster_rank() : 0;
  init_ring_barriers<kCluster>(full, empty, w_bar);
  if (warp == 4) {  // the producer: W_g once, then per step the boxes of h_t, after the grid's arrivals
    if (lane == 0) {
      mbar_arrive_expect_tx(w_bar, boxes * kWBox);
      for (int k = 0; k < boxes; ++k) tma_load_2d(w_s + k * kWBox, &map_w, w_bar, k * 64, g * kCols);
      constexpr uint16_t kMask = static_cast<uint16_t>((1u << kCluster) - 1);
      for (int t = 0, n = 0; t < p.steps; ++t, n += boxes) {
        if (t > 0) {
          wait_count(p.counter, static_cast<unsigned>(t) * gridDim.x);
          fence_proxy_async_global();  // the other blocks' stores of y[t − 1] (generic) before these TMA reads
        }
        for (int k = 0; k < boxes; ++k) {
          const int s = (n + k) % kRing;
          mbar_wait(&empty[s], (((n + k) / kRing) & 1) ^ 1);  // free in every block of the cluster
          mbar_arrive_expect_tx(&full[s], kABox);
          if (kCluster > 1 && (n + k) % kCluster != rank) continue;  // a peer copies this box
          if (t == 0) {
            if constexpr (kCluster == 1) {
              tma_load_2d(ring + s * kABox, &map_h0, &full[s], k * 64, 0);
            } else {
              tma_load_2d_multicast(ring + s * kABox, &map_h0, &full[s], k * 64, 0, kMask);
            }
          } else if constexpr (kCluster == 1) {
            tma_load_3d(ring + s * kABox, &map_y, &full[s], k * 64, 0, t - 1);
          } else {
            tma_load_3d_multicast(ring + s * kABox, &map_y, &full[s], k * 64, 0, t - 1, kMask);
          }
        }
      }
    }
    __syncwarp();
    if constexpr (kCluster > 1) cluster_meet();
    return;
  }

  // the consumers: rows 16·warp + lane / 4 (+ 8), units 8g + 2q (+ 1) of every gate (DenseCell)
  DenseCell<T> cell(p, g, warp, lane);
  mbar_wait(w_bar, 0);
  for (int t = 0, n = 0; t < p.steps; ++t, n += boxes) {
    float gx[2][4][2];
    cell.input_term(p, t, gx);
    float acc[kCols / 2];
    ring_product<T, kCols>(acc, ring, w_s, full, empty, n, boxes, lane, release_stage<kCluster>);
    cell.finish_step(p, t, acc, gx);
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
    case 1: return resident_blocks(lstm_wgmma_forward_kernel<T, 1>, device, kFwdThreads, smem, 1);
    case 2: return resident_blocks(lstm_wgmma_forward_kernel<T, 2>, device, kFwdThreads, smem, 2);
    case 4: return resident_blocks(lstm_wgmma_forward_kernel<T, 4>, device, kFwdThreads, smem, 4);
    default: return 0;
  }
}

template <class T, int kCluster>
void launch(const Tensor& gx, const Tensor& h0, const Tensor& c0, const Tensor& wh, const Tensor& bias,
            double forget_bias, const Tensor& y, const Tensor& hT, const Tensor& cT, const Tensor& gates,
            const Tensor& cells) {
  const int64_t hidden = h0.size(1);
  const cudaStream_t stream = current_stream(y);
  const size_t smem = wgmma_smem_bytes(hidden);
  DenseForwardLaunch<T> l(gx, h0, c0, wh, bias, forget_bias, y, hT, cT, gates, cells, kCols, stream);
  constexpr auto kernel = &lstm_wgmma_forward_kernel<T, kCluster>;
  TS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t cfg =
      wgmma_launch_config(static_cast<int>(hidden / kUnits), kFwdThreads, smem, stream, kCluster, true, attrs);
  const cudaError_t launched = cudaLaunchKernelEx(&cfg, kernel, l.map_h0, l.map_y, l.map_w, l.args);
  l.release();  // stream-ordered: freed after the kernel
  TS_CUDA_CHECK(launched);
  TS_CUDA_LAUNCH_CHECK("lstm_recurrence (wgmma)");
  g_fwd_launches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace
}  // namespace sm90

bool wgmma_wanted() {
  const char* e = std::getenv("TESSERA_LSTM_WGMMA");
  const std::string choice = e ? e : "auto";  // the default (lstm_persistent.h)
  TS_CHECK(choice == "0" || choice == "1" || choice == "auto", ValueError,
           "TESSERA_LSTM_WGMMA must be 0, 1 or auto, not '" << choice << "'");
  return choice != "0";  // auto: the measured winners, the wgmma kernels in all four cases
}

namespace sm90 {
SparsePairs sparse_pairs_choice() {
  const char* e = std::getenv("TESSERA_LSTM_SPARSE_PAIRS");
  const std::string choice = e ? e : "auto";
  TS_CHECK(choice == "0" || choice == "1" || choice == "auto", ValueError,
           "TESSERA_LSTM_SPARSE_PAIRS must be 0, 1 or auto, not '" << choice << "'");
  if (choice == "0") return SparsePairs::never;
  return choice == "1" ? SparsePairs::wherever_they_fit : SparsePairs::where_needed;
}

SparseStreamed sparse_streamed_choice() {
  const char* e = std::getenv("TESSERA_LSTM_SPARSE_STREAMED");
  const std::string v = e ? e : "1";
  if (v == "0") return {};
  if (v == "1") return {1 << 20, false};
  const bool capped = v.size() > 2 && v.size() <= 5 && v.compare(0, 2, "1:") == 0 &&
                      v.find_first_not_of("0123456789", 2) == std::string::npos;
  TS_CHECK(capped, ValueError, "TESSERA_LSTM_SPARSE_STREAMED must be 0, 1 or 1:N, not '" << v << "'");
  return {std::stoi(v.substr(2)), true};
}

bool sparse_gate_boxes_wanted() { return env_switch("TESSERA_LSTM_SPARSE_GATE_BOXES", "0", "1", true); }


std::atomic<uint64_t> g_sparse_paired_launches{0};
void count_sparse_paired_launch() { g_sparse_paired_launches.fetch_add(1, std::memory_order_relaxed); }

// How many of the forward kernel's blocks can be resident at once in clusters of `cluster`.
int forward_resident_blocks(int device, DType dtype, int64_t hidden, int cluster) {
  const size_t smem = wgmma_smem_bytes(hidden);
  return dtype == DType::bf16 ? resident<__nv_bfloat16>(device, smem, cluster)
                              : resident<__half>(device, smem, cluster);
}
}  // namespace sm90

std::string wgmma_forward_unfit(int device, DType dtype, int64_t batch, int64_t hidden, const LayoutPtr& layout) {
  if (layout) return "dense layers only";
  if (dtype != DType::bf16 && dtype != DType::f16) return "bf16 or f16 only";
  if (batch < 1 || batch > sm90::kMaxBatch) return "batch 1 to 64 only";
  if (hidden < 64 || hidden % 64 != 0) return "hidden a multiple of 64 only";
  if (!sm90::device_ok(device)) return "compute capability 9.0 only";
  if (sm90::wgmma_smem_bytes(hidden) > sm90::smem_optin(device))
    return "a block's slice of W_h and the ring pass its shared memory";
  if (sm90::forward_resident_blocks(device, dtype, hidden, 1) < hidden / sm90::kUnits ||
      sm90::backward_resident_blocks(device, dtype, hidden, 1) < hidden / sm90::kUnits)
    return "more groups of 8 units than resident blocks";
  return "";
}

int wgmma_cluster(int device, DType dtype, int64_t batch, int64_t hidden, const LayoutPtr& layout, bool backward) {
  int cluster = 1;  // the multicast clusters measured slower (lstm_persistent.h)
  if (const char* e = std::getenv("TESSERA_LSTM_WGMMA_CLUSTER")) {
    const bool ok = std::strcmp(e, "1") == 0 || std::strcmp(e, "2") == 0 || std::strcmp(e, "4") == 0;
    TS_CHECK(ok, ValueError, "TESSERA_LSTM_WGMMA_CLUSTER must be 1, 2 or 4, not '" << e << "'");
    cluster = std::atoi(e);
  }
  if (!wgmma_forward_unfit(device, dtype, batch, hidden, layout).empty()) return 0;
  const int grid = static_cast<int>(hidden / sm90::kUnits);
  if (grid % cluster != 0) return 0;
  const int resident = backward ? sm90::backward_resident_blocks(device, dtype, hidden, cluster)
                                : sm90::forward_resident_blocks(device, dtype, hidden, cluster);
  return resident >= grid ? cluster : 0;
}

namespace sm90 {
int remembered_residency(const void* kernel, int device, int threads, size_t smem, int cluster,
                         const std::function<int()>& ask) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int, size_t, int>, int> known;
  const auto key = std::make_tuple(kernel, device, threads, smem, cluster);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (const auto it = known.find(key); it != known.end()) return it->second;
  }
  const int n = ask();  // outside the lock: the driver calls may take a while
  std::lock_guard<std::mutex> lock(mu);
  known[key] = n;
  return n;
}

SparseLayoutFacts sparse_layout_facts(const LayoutPtr& layout) {
  static std::mutex mu;
  static std::map<const BlockLayout*, std::pair<std::weak_ptr<const BlockLayout>, SparseLayoutFacts>> known;
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto it = known.find(layout.get());
    if (it != known.end() && it->second.first.lock() == layout) return it->second.second;
  }
  SparseLayoutFacts f;
  const std::vector<int32_t>&cp = layout->col_ptr(), &rp = layout->row_ptr();
  for (size_t c = 0; c + 1 < cp.size(); ++c) f.max_col_blocks = std::max(f.max_col_blocks, cp[c + 1] - cp[c]);
  for (size_t r = 0; r + 1 < rp.size(); ++r) f.max_row_blocks = std::max(f.max_row_blocks, rp[r + 1] - rp[r]);
  const int64_t q = layout->block_cols() / 4;
  for (int64_t c = 0; c + 1 < q; c += 2) f.max_pair_col_blocks = std::max(f.max_pair_col_blocks, cp[c + 2] - cp[c]);
  for (size_t r = 0; r + 2 < rp.size(); r += 2)
    f.max_pair_row_blocks = std::max(f.max_pair_row_blocks, rp[r + 2] - rp[r]);
  f.gate_layout = layout->block_rows() == q && gate_quarter(*layout) == q;  // [H, 4H], the gates' lists alike
  std::lock_guard<std::mutex> lock(mu);
  known[layout.get()] = {layout, f};
  return f;
}
}  // namespace sm90

void wgmma_forward(int cluster, const Tensor& gx, const Tensor& h0, const Tensor& c0, const Tensor& wh,
                   const Tensor& bias, double forget_bias, const Tensor& y, const Tensor& hT, const Tensor& cT,
                   const Tensor& gates, const Tensor& cells) {
  auto run = [&](auto type) {
    using T = decltype(type);
    switch (cluster) {
      case 1: return sm90::launch<T, 1>(gx, h0, c0, wh, bias, forget_bias, y, hT, cT, gates, cells);
      case 2: return sm90::launch<T, 2>(gx, h0, c0, wh, bias, forget_bias, y, hT, cT, gates, cells);
      case 4: return sm90::launch<T, 4>(gx, h0, c0, wh, bias, forget_bias, y, hT, cT, gates, cells);
      default: TS_THROW(ValueError, "lstm_recurrence (wgmma): clusters of 1, 2 or 4, not " << cluster);
    }
  };
  if (gx.dtype() == DType::bf16) {
    run(__nv_bfloat16{});
  } else {
    run(__half{});
  }
}

uint64_t wgmma_sparse_paired_launch_count() {
  return sm90::g_sparse_paired_launches.load(std::memory_order_relaxed);
}

uint64_t wgmma_forward_launch_count() { return sm90::g_fwd_launches.load(std::memory_order_relaxed); }

}  // namespace cuda
}  // namespace tessera
