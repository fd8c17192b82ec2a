// The tensor-core backward of block_attention (see flash_sm80_backward.h): FlashAttention-2's
// backward on mma.sync.m16n8k16 over the layout's tiles, in two kernels without atomics.
//
// With S = scale·Q_i·K_jᵀ (masked above the diagonal of a diagonal tile), P = exp(S − lse),
// dP = dO_i·V_jᵀ, dS = P ⊙ (dP − Δ) (Δ = rowsum(dO ⊙ O), given):
//   dq kernel, one thread block per (b·h, query block i), warp w its 16 query rows: over the key
//     blocks of row (h, i) (K_j, V_j double-buffered by cp.async), S and dP from the Q and dO
//     fragments in registers, then dQ_i += dS·K_j; finally dQ_i ·= scale.
//   dkdv kernel, one thread block per (b·k/v head, key block j), warp w its 16 key rows: over the
//     G query heads h that read the k/v head (grouped-query attention; G = 1 without) and the query
//     blocks of each column (h, j) (Q_i, dO_i, lse_i, Δ_i double-buffered), Sᵀ = K_j·Q_iᵀ and
//     dPᵀ = V_j·dO_iᵀ from the K and V fragments, Pᵀ and dSᵀ in registers, then
//     dV_j += Pᵀ·dO_i and dK_j += dSᵀ·Q_i; finally dK_j ·= scale.
// P and dS are rounded to the operands' dtype for the second products (as in the forward).
// With dropout (mask Z regenerated from the forward's Philox stream, c = 1/(1 − p)): dP is
// c·Z ⊙ dP, and dV sums (c·Z ⊙ P)ᵀ·dO_i. Keys are in the swizzled order of flash_sm80.cuh: in
// the dq kernel as the n/k index of its products, in the dkdv kernel as its rows.
// Deterministic: each output is summed by one thread in the layout's table order.
#include "kernels/block_attention_backward/flash_sm80_backward.h"
#include "kernels/block_attention_backward/flash_sm90_backward.h"

#include <atomic>

#include "core/cuda/check.cuh"
#include "core/error.h"
#include "kernels/common/cuda/flash_sm80.cuh"

namespace tessera {
namespace cuda {
namespace {

using flash::kStride;
using flash::load_a;
using flash::load_tile;
using flash::product_nn;
using flash::product_nt;
using flash::store_rows;
using flash::swizzled_key;
using sm80::cp_async16;
using sm80::cp_async_commit;
using sm80::cp_async_wait;

constexpr float kLog2e = 1.4426950408889634f;

std::atomic<uint64_t> g_launches{0};

template <int BS, int D>
struct BackwardTile {
  static constexpr int kThreads = 32 * (BS / 16);
  static constexpr int kTile = BS * kStride<D>;
  static constexpr int kSmemBytes = 6 * kTile * 2 + 4 * BS * 4;  // six tiles, and lse/Δ rows twice
};

template <class T, int BS, int D, bool kDropout>
__global__ void __launch_bounds__(BackwardTile<BS, D>::kThreads)
    flash_dq_kernel(const T* __restrict__ g, const T* __restrict__ q, const T* __restrict__ k,
                    const T* __restrict__ v, const float* __restrict__ lse, const float* __restrict__ delta,
                    T* __restrict__ dq, FlashStrides qs, FlashStrides kvs, FlashStrides os, int64_t H, int64_t G,
                    int64_t nb, float scale_log2, float scale,
                    const int32_t* __restrict__ row_ptr, const int32_t* __restrict__ key_blocks,
                    AttentionDropout drop, const int32_t* __restrict__ base) {
  using Tile = BackwardTile<BS, D>;
  constexpr int kThreads = Tile::kThreads, kTile = Tile::kTile;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  T* sq = reinterpret_cast<T*>(smem_raw);
  T* sg = sq + kTile;
  T* sk = sg + kTile;      // [2][tile]
  T* sv = sk + 2 * kTile;  // [2][tile]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gq = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.x / nb, i = blockIdx.x % nb, h = bh % H;
  const int64_t rows = bh * nb * BS + i * BS;  // of lse and Δ [B·H·T]
  const int32_t begin = row_ptr[h * nb + i], end = row_ptr[h * nb + i + 1];
  // Token 0 of (b, h) in q, dq and dO, of (b, h / G) in k and v.
  const int64_t q0 = flash::at(qs, bh / H, h), kv0 = flash::at(kvs, bh / H, h / G), o0 = flash::at(os, bh / H, h);
  auto load_kv = [&](int buf, int64_t j) {
    load_tile<T, BS, D, kThreads>(sk + buf * kTile, k + kv0 + j * BS * kvs.token, kvs.token);
    load_tile<T, BS, D, kThreads>(sv + buf * kTile, v + kv0 + j * BS * kvs.token, kvs.token);
  };
  load_tile<T, BS, D, kThreads>(sq, q + q0 + i * BS * qs.token, qs.token);
  load_tile<T, BS, D, kThreads>(sg, g + o0 + i * BS * os.token, os.token);
  load_kv(0, key_blocks[begin]);  // every row lists its diagonal block
  cp_async_commit();
  float lse2[2], dl[2];  // rows 16w + gq, + 8: lse in the log2 domain, Δ
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int64_t r = rows + warp * 16 + gq + 8 * hh;
    lse2[hh] = lse[r] * kLog2e;
    dl[hh] = delta[r];
  }
  drop = drop.with_base(base);
  const int64_t T_ = nb * BS;
  const uint64_t row_elem0 = static_cast<uint64_t>(rows + warp * 16 + gq) * T_;  // (bh, row, key 0)
  const uint64_t row_elem1 = row_elem0 + 8 * static_cast<uint64_t>(T_);
  float acc[D / 8][4];
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[dn][e] = 0.f;
  uint32_t qf[D / 16][4], gf[D / 16][4];
  for (int32_t p = begin; p < end; ++p) {
    const int buf = (p - begin) & 1;
    if (p + 1 < end) load_kv(buf ^ 1, key_blocks[p + 1]);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if (p == begin) {
      load_a<D>(qf, sq, warp * 16);
      load_a<D>(gf, sg, warp * 16);
    }
    const T* kt = sk + buf * kTile;
    const T* vt = sv + buf * kTile;
    float s[BS / 8][4], dp[BS / 8][4];
    product_nt<T, BS, D, true>(s, qf, kt);   // S / scale, keys swizzled
    product_nt<T, BS, D, true>(dp, gf, vt);  // dP
    const int64_t j = key_blocks[p];
    const bool diagonal = j == i;
    if constexpr (kDropout) {  // dP ·= c·Z
      float z[BS / 8][4];
      flash::dropout_rows<BS>(z, drop, row_elem0, row_elem1, j * BS);
#pragma unroll
      for (int nt = 0; nt < BS / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[nt][e] *= z[nt][e];
    }
#pragma unroll
    for (int nt = 0; nt < BS / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hh = e / 2, row = warp * 16 + gq + 8 * hh;
        const float pr = diagonal && swizzled_key(nt, e, t) > row ? 0.f : exp2f(s[nt][e] * scale_log2 - lse2[hh]);
        s[nt][e] = pr * (dp[nt][e] - dl[hh]);  // dS
      }
    product_nn<T, BS, D, true>(acc, s, kt);  // dQ += dS·K_j
    __syncthreads();  // every warp is done with this buffer before the next copy fills it
  }
  store_rows<T, D>(dq + q0 + i * BS * qs.token, qs.token, acc, warp * 16, scale);
}

template <class T, int BS, int D, bool kDropout>
__global__ void __launch_bounds__(BackwardTile<BS, D>::kThreads)
    flash_dkdv_kernel(const T* __restrict__ g, const T* __restrict__ q, const T* __restrict__ k,
                      const T* __restrict__ v, const float* __restrict__ lse, const float* __restrict__ delta,
                      T* __restrict__ dk, T* __restrict__ dv, FlashStrides qs, FlashStrides kvs, FlashStrides os,
                      int64_t H, int64_t G, int64_t nb, float scale_log2,
                      float scale, const int32_t* __restrict__ col_ptr, const int32_t* __restrict__ query_blocks,
                      AttentionDropout drop, const int32_t* __restrict__ base) {
  using Tile = BackwardTile<BS, D>;
  constexpr int kThreads = Tile::kThreads, kTile = Tile::kTile;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  T* sk = reinterpret_cast<T*>(smem_raw);
  T* sv = sk + kTile;
  T* sq = sv + kTile;      // [2][tile]
  T* sg = sq + 2 * kTile;  // [2][tile]
  float* slse = reinterpret_cast<float*>(sg + 2 * kTile);  // [2][BS]
  float* sdl = slse + 2 * BS;                               // [2][BS]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gq = lane / 4, t = lane % 4;
  // Key block j of key/value head bkv; the items are (query head bh, entry p of column (bh % H,
  // j)) over its G query heads in order, each column's entries in order (every column lists its
  // diagonal block, so each head has one at least).
  const int64_t bkv = blockIdx.x / nb, j = blockIdx.x % nb;
  const int64_t Hkv = H / G, kv0 = flash::at(kvs, bkv / Hkv, bkv % Hkv);  // token 0 of (b, k/v head)
  auto col_begin = [&](int64_t bh) { return col_ptr[(bh % H) * nb + j]; };
  auto col_end = [&](int64_t bh) { return col_ptr[(bh % H) * nb + j + 1]; };
  auto load_q = [&](int buf, int64_t bh, int64_t i) {
    load_tile<T, BS, D, kThreads>(sq + buf * kTile, q + flash::at(qs, bh / H, bh % H) + i * BS * qs.token, qs.token);
    load_tile<T, BS, D, kThreads>(sg + buf * kTile, g + flash::at(os, bh / H, bh % H) + i * BS * os.token, os.token);
    const int64_t rows = bh * nb * BS + i * BS;
    for (int c = threadIdx.x; c < BS / 4; c += kThreads) {  // lse and Δ rows: 16-byte chunks
      cp_async16(slse + buf * BS + 4 * c, lse + rows + 4 * c, true);
      cp_async16(sdl + buf * BS + 4 * c, delta + rows + 4 * c, true);
    }
  };
  load_tile<T, BS, D, kThreads>(sk, k + kv0 + j * BS * kvs.token, kvs.token);
  load_tile<T, BS, D, kThreads>(sv, v + kv0 + j * BS * kvs.token, kvs.token);
  int64_t bh = bkv * G;
  int32_t p = col_begin(bh);
  load_q(0, bh, query_blocks[p]);
  cp_async_commit();
  float acc_dk[D / 8][4], acc_dv[D / 8][4];
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[dn][e] = acc_dv[dn][e] = 0.f;
  uint32_t kf[D / 16][4], vf[D / 16][4];
  drop = drop.with_base(base);
  const int64_t T_ = nb * BS;
  for (int item = 0;; ++item) {
    const int buf = item & 1;
    int64_t next_bh = bh;  // the next item: the column's next entry, else the next head's first
    int32_t next_p = p + 1;
    if (next_p == col_end(bh) && ++next_bh < (bkv + 1) * G) next_p = col_begin(next_bh);
    const bool has_next = next_bh < (bkv + 1) * G;
    if (has_next) load_q(buf ^ 1, next_bh, query_blocks[next_p]);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    // Rows: the warp's 16 keys in swizzled order. Up to D = 64 their K and V fragments stay in
    // registers; at D = 128 they are read again for each query block (registers for dK and dV).
    constexpr bool kKeepFragments = D <= 64;
    if (kKeepFragments && item == 0) {
      load_a<D, true>(kf, sk, warp * 16);
      load_a<D, true>(vf, sv, warp * 16);
    }
    const T* qt = sq + buf * kTile;
    const T* gt = sg + buf * kTile;
    const float* bl = slse + buf * BS;
    const float* bd = sdl + buf * BS;
    float st[BS / 8][4], dpt[BS / 8][4];  // [16 keys of this warp, BS queries]
    if (!kKeepFragments) load_a<D, true>(kf, sk, warp * 16);
    product_nt<T, BS, D>(st, kf, qt);  // Sᵀ / scale
    if (!kKeepFragments) load_a<D, true>(vf, sv, warp * 16);
    product_nt<T, BS, D>(dpt, vf, gt);  // dPᵀ
    const int64_t i = query_blocks[p];
    const bool diagonal = i == j;
    float z[BS / 8][4];  // c·Z (kDropout only)
    if constexpr (kDropout) flash::dropout_cols<BS>(z, drop, bh * T_, T_, i * BS, j * BS + warp * 16);
#pragma unroll
    for (int nt = 0; nt < BS / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = warp * 16 + flash::key16(gq, e / 2), query = nt * 8 + 2 * t + (e & 1);
        const float pr = diagonal && key > query ? 0.f : exp2f(st[nt][e] * scale_log2 - bl[query] * kLog2e);
        if constexpr (kDropout) {
          st[nt][e] = pr * z[nt][e];                               // (c·Z ⊙ P)ᵀ
          dpt[nt][e] = pr * (dpt[nt][e] * z[nt][e] - bd[query]);  // dSᵀ
        } else {
          st[nt][e] = pr;                              // Pᵀ
          dpt[nt][e] = pr * (dpt[nt][e] - bd[query]);  // dSᵀ
        }
      }
    product_nn<T, BS, D>(acc_dv, st, gt);   // dV += Pᵀ·dO_i
    product_nn<T, BS, D>(acc_dk, dpt, qt);  // dK += dSᵀ·Q_i
    __syncthreads();
    if (!has_next) break;
    bh = next_bh;
    p = next_p;
  }
  store_rows<T, D, true>(dk + kv0 + j * BS * kvs.token, kvs.token, acc_dk, warp * 16, scale);
  store_rows<T, D, true>(dv + kv0 + j * BS * kvs.token, kvs.token, acc_dv, warp * 16, 1.f);
}

template <class T, int BS, int D, bool kDropout>
void launch(const FlashBackward& f, cudaStream_t stream) {
  using Tile = BackwardTile<BS, D>;
  constexpr auto dq_kernel = &flash_dq_kernel<T, BS, D, kDropout>;
  constexpr auto dkdv_kernel = &flash_dkdv_kernel<T, BS, D, kDropout>;
  static const bool configured = [] {
    TS_CUDA_CHECK(cudaFuncSetAttribute(dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
    TS_CUDA_CHECK(cudaFuncSetAttribute(dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
    return true;
  }();
  (void)configured;
  const int64_t blocks = f.B * f.H * f.nb;
  TS_CHECK(blocks <= INT32_MAX, ShapeError, "block_attention_backward: too many blocks for one launch");
  const float scale = static_cast<float>(f.scale), scale_log2 = scale * kLog2e;
  auto c = [](const void* p) { return static_cast<const T*>(p); };
  dq_kernel<<<static_cast<unsigned>(blocks), Tile::kThreads, Tile::kSmemBytes, stream>>>(
      c(f.g), c(f.q), c(f.k), c(f.v), f.lse, f.delta, static_cast<T*>(f.dq), f.qs, f.kvs, f.os, f.H, f.G, f.nb,
      scale_log2, scale,
      f.row_ptr, f.key_blocks, f.dropout, f.base);
  TS_CUDA_LAUNCH_CHECK("block_attention_backward (tensor cores, dq)");
  dkdv_kernel<<<static_cast<unsigned>(blocks / f.G), Tile::kThreads, Tile::kSmemBytes, stream>>>(
      c(f.g), c(f.q), c(f.k), c(f.v), f.lse, f.delta, static_cast<T*>(f.dk), static_cast<T*>(f.dv), f.qs, f.kvs, f.os,
      f.H, f.G, f.nb, scale_log2, scale, f.col_ptr, f.query_blocks, f.dropout, f.base);
  TS_CUDA_LAUNCH_CHECK("block_attention_backward (tensor cores, dk dv)");
  g_launches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

bool flash_backward_supported(const FlashBackward& given, int device) {
  using flash::aligned16;
  if (flash::scalar_path_forced()) return false;
  const FlashBackward f = flash::with_contiguous_strides(given);
  if (!aligned16(f.qs) || !aligned16(f.kvs) || !aligned16(f.os)) return false;
  if (f.dtype != DType::bf16 && f.dtype != DType::f16) return false;
  if ((f.bs != 32 && f.bs != 64) || (f.D != 32 && f.D != 64 && f.D != 128)) return false;
  for (const void* p : {f.g, f.q, f.k, f.v, static_cast<const void*>(f.dq), static_cast<const void*>(f.dk),
                        static_cast<const void*>(f.dv), static_cast<const void*>(f.lse)})
    if (!aligned16(p)) return false;
  int major = 0;
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 8;
}

void flash_backward(const FlashBackward& given, cudaStream_t stream) {
  const FlashBackward f = flash::with_contiguous_strides(given);
#ifdef TESSERA_HAVE_SM90A
  int device = 0;
  TS_CUDA_CHECK(cudaGetDevice(&device));
  if (sm90::flash_backward_supported(f, device) && sm90::flash_backward(f, stream)) {
    g_launches.fetch_add(1, std::memory_order_relaxed);  // a tensor-core backward too
    return;
  }
#endif
  flash::dispatch_flash(f.dtype, f.bs, f.D, f.dropout.on(), [&](auto tag, auto bs, auto d, auto dropout) {
    launch<decltype(tag), decltype(bs)::value, decltype(d)::value, decltype(dropout)::value>(f, stream);
  });
}

uint64_t flash_backward_launches() { return g_launches.load(std::memory_order_relaxed); }

uint64_t flash_backward_sm90_launches() {
#ifdef TESSERA_HAVE_SM90A
  return sm90::flash_backward_launches();
#else
  return 0;
#endif
}

}  // namespace cuda
}  // namespace tessera
