// The Hopper (sm_90a) backward of block_attention (see flash_sm90_backward.h): the two kernels of
// flash_sm80_backward.cu (no atomics) on wgmma, with S = scale·Q_i·K_jᵀ (masked above the
// diagonal of a diagonal tile), P = exp(S − lse), dP = dO_i·V_jᵀ, dS = P ⊙ (dP − Δ):
//   dq kernel, one thread block per (b·h, query block i): Q_i and dO_i copied once, K_j and V_j
//     per listed key block into a ring of stages; S = Q_i·K_jᵀ and dP = dO_i·V_jᵀ (wgmma, both
//     operands K-major), dS in registers, dQ_i += dS·K_j (dS from registers, K_j MN-major);
//     finally dQ_i ·= scale.
//   dkdv kernel, one thread block per (b·k/v head, key block j): K_j and V_j copied once, Q_i,
//     dO_i, lse_i and Δ_i per item (the column's query blocks for each of the G query heads of
//     the k/v head) into the ring; Sᵀ = K_j·Q_iᵀ, dPᵀ = V_j·dO_iᵀ, Pᵀ and dSᵀ in registers, then
//     dV_j += Pᵀ·dO_i and dK_j += dSᵀ·Q_i (Pᵀ, dSᵀ from registers, dO_i and Q_i MN-major);
//     finally dK_j ·= scale.
// Warps 0-3 are the consumer warpgroup (warp w rows 16w .. 16w+15 of its tile), warp 4 the
// producer (TMA over the 4-D maps of flash_sm90.cuh; lse and Δ rows by bulk copies). P and dS are
// rounded to the operands' dtype for the second products, as in the forward. Deterministic: each
// output element is summed by one thread in the layout's table order. Head dims 64 and 128
// (BwdTile<D>: a [64, D] tile is D/64 TMA boxes of 64 values; S and dP sum over all of them).
#include "kernels/block_attention_backward/flash_sm90_backward.h"

#include "kernels/common/cuda/flash_sm90.cuh"

namespace tessera {
namespace cuda {
namespace sm90 {
namespace {

using flash90::kBlock;
using flash90::kBoxBytes;

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kStages = 2;
constexpr int kBwdThreads = 160;        // the consumer warpgroup, the producer warp
constexpr int kRowBytes = kBlock * 4;   // 64 f32 values of lse or Δ

// The tiles of head dim D (64 or 128): [64 tokens, D] 16-bit values as D/64 TMA boxes.
template <int D>
struct BwdTile {
  static constexpr int kBoxes = D / 64;
  static constexpr int kTileBytes = kBoxes * kBoxBytes;
  // Two resident tiles, kStages stages of two tiles and two f32 rows, barriers, alignment.
  static constexpr int kSmemBytes =
      2 * kTileBytes + kStages * (2 * kTileBytes + 2 * kRowBytes) + (1 + 2 * kStages) * 8 + 1024;
  // Thread blocks per SM the registers must allow: two at D 64 (10 warps: three on one
  // scheduler, whose quarter of the register file allows 170 a thread; unbounded, ptxas took 190
  // and one ran per SM, 1.10-1.15x slower: docs/attention_kernels.md); one at D 128, whose dK
  // and dV accumulators alone take 128 registers a thread.
  static constexpr int kDkdvBlocksPerSm = D == 64 ? 2 : 1;
};

std::atomic<uint64_t> g_backward_launches{0};

// d (+)= A·Bᵀ over D with both [64, D] tiles K-major in shared memory (D/64 boxes of 64 values).
template <class T, int D>
__device__ __forceinline__ void product_kmajor(float (&d)[32], const uint8_t* a, const uint8_t* b) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const int off = (kk / 4) * kBoxBytes + (kk % 4) * 32;
    Wgmma<T, 64>::template run<0, 0>(d, make_desc(a + off, 16, 1024, 128), make_desc(b + off, 16, 1024, 128), kk > 0);
  }
}

// d += X·B: X [64, 64] from registers (its accumulators rounded to T: the A fragments),
// B [64 k, N n] MN-major in shared memory (N/64 boxes, kBoxBytes apart).
template <class T, int N>
__device__ __forceinline__ void product_rs(float (&d)[N / 2], const float (&x)[32], const uint8_t* b) {
  uint32_t a[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) a[kk][r] = flash::pack<T>(x[8 * kk + 2 * r], x[8 * kk + 2 * r + 1]);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    WgmmaRS<T, N>::template run<1>(d, a[kk], make_desc(b + kk * 16 * 128, kBoxBytes, 1024, 128));
}

// Stores the warpgroup's [64, D] accumulators times `scale` into rows `ld` apart at dst.
template <class T, int D>
__device__ __forceinline__ void store_tile(T* dst, int64_t ld, const float (&acc)[D / 2], float scale) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    T* row = dst + (warp * 16 + g + 8 * hh) * ld;
#pragma unroll
    for (int c = 0; c < D / 8; ++c)
      *reinterpret_cast<uint32_t*>(row + c * 8 + 2 * t) =
          flash::pack<T>(acc[4 * c + 2 * hh] * scale, acc[4 * c + 2 * hh + 1] * scale);
  }
}

__device__ __forceinline__ void init_barriers(uint64_t* once, uint64_t* full, uint64_t* empty) {
  if (threadIdx.x == 0) {
    mbar_init(once, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 4);  // one arrive per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();
}

template <class T, int D>
__global__ void __launch_bounds__(kBwdThreads)
    dq_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_g,
              const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v,
              const float* __restrict__ lse, const float* __restrict__ delta, T* __restrict__ dq, FlashStrides qs,
              int H, int G, int nb, float scale_log2, float scale, const int32_t* __restrict__ row_ptr,
              const int32_t* __restrict__ key_blocks) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kTileBytes = BwdTile<D>::kTileBytes, kBoxes = BwdTile<D>::kBoxes;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align1024(smem_raw);
  uint8_t* sq = smem;
  uint8_t* sg = smem + kTileBytes;
  auto sk = [&](int s) { return smem + (2 + 2 * s) * kTileBytes; };
  auto sv = [&](int s) { return smem + (3 + 2 * s) * kTileBytes; };
  uint64_t* once = reinterpret_cast<uint64_t*>(smem + (2 + 2 * kStages) * kTileBytes + 2 * kStages * kRowBytes);
  uint64_t* full = once + 1;
  uint64_t* empty = full + kStages;
  const int bh = static_cast<int>(blockIdx.x / nb), i = nb - 1 - static_cast<int>(blockIdx.x % nb);
  const int b = bh / H, h = bh % H;
  const int32_t begin = row_ptr[h * nb + i], end = row_ptr[h * nb + i + 1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  init_barriers(once, full, empty);
  if (warp == 4) {
    if (lane == 0) {
      mbar_arrive_expect_tx(once, 2 * kTileBytes);
      for (int x = 0; x < kBoxes; ++x) {
        tma_load_4d(sq + x * kBoxBytes, &map_q, once, 64 * x, i * kBlock, h, b);
        tma_load_4d(sg + x * kBoxBytes, &map_g, once, 64 * x, i * kBlock, h, b);
      }
      for (int n = 0; n < end - begin; ++n) {
        const int s = n % kStages, j = key_blocks[begin + n];
        mbar_wait(&empty[s], ((n / kStages) & 1) ^ 1);
        mbar_arrive_expect_tx(&full[s], 2 * kTileBytes);
        for (int x = 0; x < kBoxes; ++x) {
          tma_load_4d(sk(s) + x * kBoxBytes, &map_k, &full[s], 64 * x, j * kBlock, h / G, b);
          tma_load_4d(sv(s) + x * kBoxBytes, &map_v, &full[s], 64 * x, j * kBlock, h / G, b);
        }
      }
    }
    return;
  }
  const int g = lane / 4, t = lane % 4;
  const int64_t rows = (static_cast<int64_t>(bh) * nb + i) * kBlock;  // of lse and Δ
  float lse2[2], dl[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    lse2[hh] = lse[rows + warp * 16 + g + 8 * hh] * kLog2e;
    dl[hh] = delta[rows + warp * 16 + g + 8 * hh];
  }
  float acc[D / 2];
#pragma unroll
  for (int e = 0; e < D / 2; ++e) acc[e] = 0.f;
  mbar_wait(once, 0);
  for (int n = 0; n < end - begin; ++n) {
    const int s = n % kStages, j = key_blocks[begin + n];
    float sacc[32], dp[32];
    mbar_wait(&full[s], (n / kStages) & 1);
    wgmma_fence();
    product_kmajor<T, D>(sacc, sq, sk(s));  // S / scale
    product_kmajor<T, D>(dp, sg, sv(s));    // dP
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(sacc);
    fence_operands(dp);
    const bool diagonal = j == i;
#pragma unroll
    for (int c = 0; c < 8; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float& x = sacc[4 * c + e];
        x = flash::exp2_ftz(x * scale_log2 - lse2[e / 2]);  // P (before the mask)
      }
    if (diagonal)  // the causal mask, on the diagonal block only (the same for the whole warpgroup)
#pragma unroll
      for (int c = 0; c < 8; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (8 * c + 2 * t + (e & 1) > warp * 16 + g + 8 * (e / 2)) sacc[4 * c + e] = 0.f;  // key > row
#pragma unroll
    for (int c = 0; c < 8; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) sacc[4 * c + e] *= dp[4 * c + e] - dl[e / 2];  // dS = P ⊙ (dP − δ)
    wgmma_fence();
    product_rs<T, D>(acc, sacc, sk(s));  // dQ += dS·K_j
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(acc);
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[s]);
  }
  store_tile<T, D>(dq + flash::at(qs, b, h) + static_cast<int64_t>(i) * kBlock * qs.token, qs.token, acc, scale);
#else
  __trap();
#endif
}

// Thread blocks per SM: BwdTile<D>::kDkdvBlocksPerSm (at D 64 ptxas takes 166 registers, no spills).
template <class T, int D>
__global__ void __launch_bounds__(kBwdThreads, BwdTile<D>::kDkdvBlocksPerSm)
    dkdv_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_g,
                const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v,
                const float* __restrict__ lse, const float* __restrict__ delta, T* __restrict__ dk,
                T* __restrict__ dv, FlashStrides kvs, int H, int G, int nb, float scale_log2, float scale,
                const int32_t* __restrict__ col_ptr, const int32_t* __restrict__ query_blocks) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kTileBytes = BwdTile<D>::kTileBytes, kBoxes = BwdTile<D>::kBoxes;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align1024(smem_raw);
  uint8_t* sk = smem;
  uint8_t* sv = smem + kTileBytes;
  auto sq = [&](int s) { return smem + (2 + 2 * s) * kTileBytes; };
  auto sg = [&](int s) { return smem + (3 + 2 * s) * kTileBytes; };
  float* rows_base = reinterpret_cast<float*>(smem + (2 + 2 * kStages) * kTileBytes);
  auto slse = [&](int s) { return rows_base + 2 * s * kBlock; };
  auto sdl = [&](int s) { return rows_base + (2 * s + 1) * kBlock; };
  uint64_t* once = reinterpret_cast<uint64_t*>(rows_base + 2 * kStages * kBlock);
  uint64_t* full = once + 1;
  uint64_t* empty = full + kStages;
  // Key block j of k/v head bkv; items (query head bh of the group, entry p of column (bh % H, j)).
  const int Hkv = H / G;
  // By increasing j: the longest causal columns first.
  const int bkv = static_cast<int>(blockIdx.x / nb), j = static_cast<int>(blockIdx.x % nb);
  const int b = bkv / Hkv, hkv = bkv % Hkv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  init_barriers(once, full, empty);
  // Walks the items in order: (bh, p) -> the next, false after the last.
  auto col_begin = [&](int bh) { return col_ptr[(bh % H) * nb + j]; };
  auto col_end = [&](int bh) { return col_ptr[(bh % H) * nb + j + 1]; };
  const int bh0 = b * H + hkv * G;  // the group's first query head (b·H + h)
  if (warp == 4) {
    if (lane == 0) {
      mbar_arrive_expect_tx(once, 2 * kTileBytes);
      for (int x = 0; x < kBoxes; ++x) {
        tma_load_4d(sk + x * kBoxBytes, &map_k, once, 64 * x, j * kBlock, hkv, b);
        tma_load_4d(sv + x * kBoxBytes, &map_v, once, 64 * x, j * kBlock, hkv, b);
      }
      int n = 0;
      for (int bh = bh0; bh < bh0 + G; ++bh)
        for (int p = col_begin(bh); p < col_end(bh); ++p, ++n) {
          const int s = n % kStages, i = query_blocks[p];
          mbar_wait(&empty[s], ((n / kStages) & 1) ^ 1);
          mbar_arrive_expect_tx(&full[s], 2 * kTileBytes + 2 * kRowBytes);
          for (int x = 0; x < kBoxes; ++x) {
            tma_load_4d(sq(s) + x * kBoxBytes, &map_q, &full[s], 64 * x, i * kBlock, bh % H, b);
            tma_load_4d(sg(s) + x * kBoxBytes, &map_g, &full[s], 64 * x, i * kBlock, bh % H, b);
          }
          const int64_t rows = (static_cast<int64_t>(bh) * nb + i) * kBlock;
          bulk_load(slse(s), lse + rows, kRowBytes, &full[s]);
          bulk_load(sdl(s), delta + rows, kRowBytes, &full[s]);
        }
    }
    return;
  }
  const int g = lane / 4, t = lane % 4;
  float acc_dk[D / 2], acc_dv[D / 2];
#pragma unroll
  for (int e = 0; e < D / 2; ++e) acc_dk[e] = acc_dv[e] = 0.f;
  mbar_wait(once, 0);
  int n = 0;
  for (int bh = bh0; bh < bh0 + G; ++bh)
    for (int p = col_begin(bh); p < col_end(bh); ++p, ++n) {
      const int s = n % kStages, i = query_blocks[p];
      float st[32], dpt[32];  // [64 keys, 64 queries]
      mbar_wait(&full[s], (n / kStages) & 1);
      wgmma_fence();
      product_kmajor<T, D>(st, sk, sq(s));   // Sᵀ / scale
      product_kmajor<T, D>(dpt, sv, sg(s));  // dPᵀ
      wgmma_commit();
      wgmma_wait<0>();
      fence_operands(st);
      fence_operands(dpt);
      const bool diagonal = i == j;
      const float* bl = slse(s);
      const float* bd = sdl(s);
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const float2 lc = ld_shared2(bl + 8 * c + 2 * t);  // the stage's lse of queries 8c + 2t, +1
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float l2 = (e == 0 ? lc.x : lc.y) * kLog2e;
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            float& x = st[4 * c + 2 * hh + e];
            x = flash::exp2_ftz(x * scale_log2 - l2);  // Pᵀ (before the mask)
          }
        }
      }
      if (diagonal)  // the causal mask, on the diagonal block only (the same for the whole warpgroup)
#pragma unroll
        for (int c = 0; c < 8; ++c)
#pragma unroll
          for (int e = 0; e < 2; ++e)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
              if (warp * 16 + g + 8 * hh > 8 * c + 2 * t + e) st[4 * c + 2 * hh + e] = 0.f;  // key > query
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const float2 dc = ld_shared2(bd + 8 * c + 2 * t);  // their δ
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float dq = e == 0 ? dc.x : dc.y;
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int x = 4 * c + 2 * hh + e;
            dpt[x] = st[x] * (dpt[x] - dq);  // dSᵀ (st is now Pᵀ)
          }
        }
      }
      wgmma_fence();
      product_rs<T, D>(acc_dv, st, sg(s));   // dV += Pᵀ·dO_i
      product_rs<T, D>(acc_dk, dpt, sq(s));  // dK += dSᵀ·Q_i
      wgmma_commit();
      wgmma_wait<0>();
      fence_operands(acc_dv);
      fence_operands(acc_dk);
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[s]);
    }
  const int64_t at = flash::at(kvs, b, hkv) + static_cast<int64_t>(j) * kBlock * kvs.token;
  store_tile<T, D>(dk + at, kvs.token, acc_dk, scale);
  store_tile<T, D>(dv + at, kvs.token, acc_dv, 1.f);
#else
  __trap();
#endif
}

template <class T, int D>
bool launch(const FlashBackward& f, cudaStream_t stream) {
  using Tile = BwdTile<D>;
  const int64_t T_ = f.nb * kBlock, Hkv = f.H / f.G;
  CUtensorMap mq, mg, mk, mv;
  if (!flash90::head_map(&mq, f.q, f.dtype, f.D, T_, f.H, f.B, f.qs) ||
      !flash90::head_map(&mg, f.g, f.dtype, f.D, T_, f.H, f.B, f.os) ||
      !flash90::head_map(&mk, f.k, f.dtype, f.D, T_, Hkv, f.B, f.kvs) ||
      !flash90::head_map(&mv, f.v, f.dtype, f.D, T_, Hkv, f.B, f.kvs))
    return false;
  constexpr auto dq = &dq_kernel<T, D>;
  constexpr auto dkdv = &dkdv_kernel<T, D>;
  static const bool configured = [] {
    TS_CUDA_CHECK(cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
    TS_CUDA_CHECK(cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
    return true;
  }();
  (void)configured;
  const float scale = static_cast<float>(f.scale), scale_log2 = scale * kLog2e;
  const int H = static_cast<int>(f.H), G = static_cast<int>(f.G), nb = static_cast<int>(f.nb);
  dq<<<static_cast<unsigned>(f.B * f.H * f.nb), kBwdThreads, Tile::kSmemBytes, stream>>>(
      mq, mg, mk, mv, f.lse, f.delta, static_cast<T*>(f.dq), f.qs, H, G, nb, scale_log2, scale, f.row_ptr,
      f.key_blocks);
  TS_CUDA_LAUNCH_CHECK("block_attention_backward (sm_90a, dq)");
  dkdv<<<static_cast<unsigned>(f.B * Hkv * f.nb), kBwdThreads, Tile::kSmemBytes, stream>>>(
      mq, mg, mk, mv, f.lse, f.delta, static_cast<T*>(f.dk), static_cast<T*>(f.dv), f.kvs, H, G, nb, scale_log2,
      scale, f.col_ptr, f.query_blocks);
  TS_CUDA_LAUNCH_CHECK("block_attention_backward (sm_90a, dk dv)");
  g_backward_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

bool flash_backward_supported(const FlashBackward& f, int device) {
  if (flash90::forced_off(/*backward=*/true)) return false;
  if (f.dtype != DType::bf16 && f.dtype != DType::f16) return false;
  if (f.bs != kBlock || (f.D != 64 && f.D != 128) || f.dropout.on()) return false;
  if (f.B * f.H * f.nb > INT32_MAX || f.nb * kBlock > INT32_MAX) return false;
  if (reinterpret_cast<uintptr_t>(f.lse) % 16 != 0 || reinterpret_cast<uintptr_t>(f.delta) % 16 != 0) return false;
  return device_ok(device);
}

bool flash_backward(const FlashBackward& f, cudaStream_t stream) {
  if (f.dtype == DType::bf16)
    return f.D == 64 ? launch<__nv_bfloat16, 64>(f, stream) : launch<__nv_bfloat16, 128>(f, stream);
  return f.D == 64 ? launch<__half, 64>(f, stream) : launch<__half, 128>(f, stream);
}

uint64_t flash_backward_launches() { return g_backward_launches.load(std::memory_order_relaxed); }

}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
