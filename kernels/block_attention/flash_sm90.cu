// The Hopper (sm_90a) forward of block_attention (see flash_sm90.h): FlashAttention's online
// softmax on wgmma, over the layout's key blocks only.
//
// One thread block per (b·h, query block i of 64 rows): warps 0-3 are the consumer warpgroup,
// warp 4 the producer. The producer copies Q_i [64, D] once and, per listed key block j, K_j and
// V_j [64, D] into a ring of kStages stages (TMA, 4-D maps over (d, token, head, batch), so the
// projection's packed rows and grouped-query heads need no copy; boxes of 64 values, rows of 128
// bytes swizzled by 128), each with its own mbarrier, so S can start before V lands. The
// consumers, per key block (warp w holds query rows 16w .. 16w+15, thread (g, q) rows g and
// g + 8 of them):
//   S = Q·K_jᵀ            wgmma m64n64k16, both operands K-major in shared memory
//   S ·= scale·log2(e), −inf where key > query on the diagonal block
//   m' = max(m, max S),  α = 2^(m − m'),  P = 2^(S − m'),  l = α·l + Σ P,  O = α·O
//   O += P·V_j            wgmma m64nDk16, P from registers (the S accumulators of 16 keys are
//                         its A fragment, rounded to q's dtype), V MN-major in shared memory
// software-pipelined: S of block n+1 is issued before P·V of block n, and its softmax runs while
// that product is on the tensor cores (FlashAttention-3's intra-warpgroup overlap),
// then O /= l and lse = ln 2 · (m + log2 l), stored from the registers. Thread blocks go out head
// by head (the few heads at work at a time keep their K and V in L2; every head of one i at a
// time read them from HBM at 66% of its bandwidth, 1.05x slower at T 4096), query blocks of a
// head by decreasing i (the longest causal rows first).
// Deterministic: each output is summed by one thread in the layout's key-block order.
#include "kernels/block_attention/flash_sm90.h"

#include "kernels/common/cuda/flash_sm90.cuh"

namespace tessera {
namespace cuda {
namespace sm90 {
namespace {

using flash90::kBlock;
using flash90::kBoxBytes;

std::atomic<uint64_t> g_flash_launches{0};

template <int D>
struct FwdTile {
  static constexpr int kThreads = 160;  // the consumer warpgroup, the producer warp
  static constexpr int kStages = D == 64 ? 3 : 2;
  static constexpr int kTileBytes = (D / 64) * kBoxBytes;  // [64, D] as D/64 boxes
  static constexpr int kSmemBytes = (1 + 2 * kStages) * kTileBytes + (1 + 3 * kStages) * 8 + 1024;
};

template <class T, int D>
__global__ void __launch_bounds__(160)
    flash_forward_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                         const __grid_constant__ CUtensorMap map_v, T* __restrict__ o, FlashStrides os,
                         float* __restrict__ lse, int H, int G, int nb, float scale_log2,
                         const int32_t* __restrict__ row_ptr, const int32_t* __restrict__ key_blocks) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tile = FwdTile<D>;
  constexpr int kStages = Tile::kStages, kTileBytes = Tile::kTileBytes, kBoxes = D / 64;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align1024(smem_raw);
  uint8_t* sq = smem;
  auto sk = [&](int s) { return smem + (1 + s) * kTileBytes; };
  auto sv = [&](int s) { return smem + (1 + kStages + s) * kTileBytes; };
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + (1 + 2 * kStages) * kTileBytes);
  uint64_t* k_full = q_full + 1;
  uint64_t* v_full = k_full + kStages;
  uint64_t* empty = v_full + kStages;

  const int bh = static_cast<int>(blockIdx.x / nb), i = nb - 1 - static_cast<int>(blockIdx.x % nb);
  const int b = bh / H, h = bh % H;
  const int32_t begin = row_ptr[h * nb + i], end = row_ptr[h * nb + i + 1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&k_full[s], 1);
      mbar_init(&v_full[s], 1);
      mbar_init(&empty[s], 4);  // one arrive per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warp == 4) {  // producer: lane 0 issues every copy
    if (lane == 0) {
      prefetch_tma_map(&map_q);
      prefetch_tma_map(&map_k);
      prefetch_tma_map(&map_v);
      mbar_arrive_expect_tx(q_full, kTileBytes);
#pragma unroll
      for (int x = 0; x < kBoxes; ++x) tma_load_4d(sq + x * kBoxBytes, &map_q, q_full, 64 * x, i * kBlock, h, b);
      for (int n = 0; n < end - begin; ++n) {
        const int s = n % kStages, j = key_blocks[begin + n];
        mbar_wait(&empty[s], ((n / kStages) & 1) ^ 1);
        mbar_arrive_expect_tx(&k_full[s], kTileBytes);
#pragma unroll
        for (int x = 0; x < kBoxes; ++x)
          tma_load_4d(sk(s) + x * kBoxBytes, &map_k, &k_full[s], 64 * x, j * kBlock, h / G, b);
        mbar_arrive_expect_tx(&v_full[s], kTileBytes);
#pragma unroll
        for (int x = 0; x < kBoxes; ++x)
          tma_load_4d(sv(s) + x * kBoxBytes, &map_v, &v_full[s], 64 * x, j * kBlock, h / G, b);
      }
    }
    return;
  }

  const int g = lane / 4, t = lane % 4;
  float acc[D / 2];  // O: d-chunk c (8 columns): acc[4c + 0, 1] row g, acc[4c + 2, 3] row g + 8
#pragma unroll
  for (int e = 0; e < D / 2; ++e) acc[e] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g, g + 8 (l: this thread's columns)
  float sacc[32];     // S: key chunk c: sacc[4c + 0, 1] row g keys 8c + 2t, +1; [4c + 2, 3] row g + 8
  uint32_t pa[4][4];  // P's A fragments, keys 16kk .. 16kk + 15
  float alpha[2];
  const int steps = end - begin;

  auto issue_s = [&](int n) {  // S = Q·K_n (async)
    const int s = n % kStages;
    mbar_wait(&k_full[s], (n / kStages) & 1);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int off = (kk / 4) * kBoxBytes + (kk % 4) * 32;
      Wgmma<T, 64>::template run<0, 0>(sacc, make_desc(sq + off, 16, 1024, 128), make_desc(sk(s) + off, 16, 1024, 128),
                                       kk > 0);
    }
    wgmma_commit();
  };
  auto issue_pv = [&](int n) {  // O += P_n·V_n (async)
    const int s = n % kStages;
    mbar_wait(&v_full[s], (n / kStages) & 1);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)  // V rows 16kk ..: MN-major, the D/64 boxes kBoxBytes apart
      WgmmaRS<T, D>::template run<1>(acc, pa[kk], make_desc(sv(s) + kk * 16 * 128, kBoxBytes, 1024, 128));
    wgmma_commit();
  };
  // The online softmax of S_n in place (S becomes P); alpha = 2^(m_old − m_new) per row; l updated.
  // m is in log2 units (scores × scale·log2 e); the scale enters with the subtraction of the max,
  // x·scale − m_new in one FFMA (the max of the raw scores, then scaled: the same bits as the max
  // of the scaled ones, the scale being positive).
  auto softmax = [&](int n) {
    const bool diagonal = key_blocks[begin + n] == i;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = warp * 16 + g + 8 * hh;
      if (diagonal)  // the causal mask, on the diagonal block only (the same for the whole warpgroup)
#pragma unroll
        for (int c = 0; c < 8; ++c)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (8 * c + 2 * t + e > row) sacc[4 * c + 2 * hh + e] = -INFINITY;
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < 8; ++c)
#pragma unroll
        for (int e = 0; e < 2; ++e) mx = fmaxf(mx, sacc[4 * c + 2 * hh + e]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[hh], mx * scale_log2);  // finite: key 0 of the block is allowed for every row
      alpha[hh] = flash::exp2_ftz(m[hh] - m_new);         // 0 on the first block (m = -inf)
      m[hh] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < 8; ++c)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = sacc[4 * c + 2 * hh + e];
          x = flash::exp2_ftz(fmaf(x, scale_log2, -m_new));
          sum += x;
        }
      l[hh] = alpha[hh] * l[hh] + sum;
    }
  };
  auto rescale_and_pack = [&] {  // O ·= alpha (no product in flight); P rounded into pa
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int c = 0; c < D / 8; ++c) {
        acc[4 * c + 2 * hh] *= alpha[hh];
        acc[4 * c + 2 * hh + 1] *= alpha[hh];
      }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) pa[kk][r] = flash::pack<T>(sacc[8 * kk + 2 * r], sacc[8 * kk + 2 * r + 1]);
  };
  auto release = [&](int n) {  // this warp is done with stage n's K and V
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[n % kStages]);
  };

  mbar_wait(q_full, 0);
  // Software pipeline (FlashAttention-3's intra-warpgroup overlap): S_n = Q·K_n is issued before
  // O += P_{n−1}·V_{n−1}, and the softmax of S_n runs while that product is on the tensor cores.
  issue_s(0);
  wgmma_wait<0>();
  fence_operands(sacc);
  softmax(0);
  rescale_and_pack();
  for (int n = 1; n < steps; ++n) {
    issue_s(n);
    issue_pv(n - 1);
    wgmma_wait<1>();  // S_n is done (groups retire in order); P_{n−1}·V_{n−1} may still run
    fence_operands(sacc);
    softmax(n);
    wgmma_wait<0>();
    fence_operands(acc);
    release(n - 1);
    rescale_and_pack();
  }
  issue_pv(steps - 1);
  wgmma_wait<0>();
  fence_operands(acc);
  release(steps - 1);

  // O /= l, lse = ln 2 · (m + log2 l); l summed over the row's four threads first.
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float sum = l[hh];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = 1.f / sum;
    const int64_t row = static_cast<int64_t>(i) * kBlock + warp * 16 + g + 8 * hh;
    T* orow = o + flash::at(os, b, h) + row * os.token;
#pragma unroll
    for (int c = 0; c < D / 8; ++c)
      *reinterpret_cast<uint32_t*>(orow + c * 8 + 2 * t) =
          flash::pack<T>(acc[4 * c + 2 * hh] * inv, acc[4 * c + 2 * hh + 1] * inv);
    if (t == 0) lse[static_cast<int64_t>(bh) * nb * kBlock + row] = 0.69314718055994531f * (m[hh] + log2f(sum));
  }
#else
  __trap();  // compiled for another architecture: the host never launches this
#endif
}

template <class T, int D>
bool launch(const FlashForward& f, cudaStream_t stream) {
  using Tile = FwdTile<D>;
  const int64_t T_ = f.nb * kBlock, Hkv = f.H / f.G;
  CUtensorMap mq, mk, mv;
  if (!flash90::head_map(&mq, f.q, f.dtype, f.D, T_, f.H, f.B, f.qs) || !flash90::head_map(&mk, f.k, f.dtype, f.D, T_, Hkv, f.B, f.kvs) ||
      !flash90::head_map(&mv, f.v, f.dtype, f.D, T_, Hkv, f.B, f.kvs))
    return false;
  constexpr auto kernel = &flash_forward_kernel<T, D>;
  static const bool configured = [] {
    TS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
    return true;
  }();
  (void)configured;
  const int64_t blocks = f.B * f.H * f.nb;
  kernel<<<static_cast<unsigned>(blocks), Tile::kThreads, Tile::kSmemBytes, stream>>>(
      mq, mk, mv, static_cast<T*>(f.o), f.os, f.lse, static_cast<int>(f.H), static_cast<int>(f.G),
      static_cast<int>(f.nb), static_cast<float>(f.scale * 1.4426950408889634), f.row_ptr,
      f.key_blocks);
  TS_CUDA_LAUNCH_CHECK("block_attention (sm_90a)");
  g_flash_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

bool flash_forward_supported(const FlashForward& f, int device) {
  if (flash90::forced_off(/*backward=*/false)) return false;
  if (f.dtype != DType::bf16 && f.dtype != DType::f16) return false;
  if (f.bs != kBlock || (f.D != 64 && f.D != 128) || f.dropout.on()) return false;
  if (f.B * f.H * f.nb > INT32_MAX || f.nb * kBlock > INT32_MAX) return false;
  return device_ok(device);
}

bool flash_forward(const FlashForward& f, cudaStream_t stream) {
  if (f.dtype == DType::bf16)
    return f.D == 64 ? launch<__nv_bfloat16, 64>(f, stream) : launch<__nv_bfloat16, 128>(f, stream);
  return f.D == 64 ? launch<__half, 64>(f, stream) : launch<__half, 128>(f, stream);
}

uint64_t flash_forward_launches() { return g_flash_launches.load(std::memory_order_relaxed); }

}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
