// The tensor-core forward of block_attention (see flash_sm80.h): FlashAttention-2's design on
// mma.sync.m16n8k16, over the layout's key blocks only.
//
// One thread block per (b·h, query block i) of BS rows; warp w owns query rows 16w .. 16w+15.
// Q_i [BS, D] is loaded once (its fragments stay in registers); the listed key blocks j of
// (h, i) stream through two shared-memory buffers of K_j and V_j [BS, D] (cp.async, the next
// block copied while this one is used). Per key block, per row t of the warp:
//   S_t = scale·log2(e) · Q_t·K_jᵀ (−inf where key > query on the diagonal block)
//   m' = max(m, max S_t),  α = 2^(m − m'),  P_t = 2^(S_t − m')   (P rounded to q's dtype)
//   l = α·l + Σ P_t,  O_t = α·O_t + P_t·V_j,  m = m'
// and at the end O_t /= l, lse_t = ln 2 · (m + log2 l). S and P never leave the registers: the
// accumulators of S·(16 keys) are exactly the A fragments of P·V (flash-attention-2's trick).
// Deterministic: each output is summed by one thread in the layout's key-block order.
#include "kernels/block_attention/flash_sm80.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/cuda/check.cuh"
#include "core/error.h"
#include "kernels/common/cuda/mma_sm80.cuh"

namespace tessera {
namespace cuda {
namespace {

using sm80::cp_async16;
using sm80::cp_async_commit;
using sm80::cp_async_wait;
using sm80::ldmatrix_x4;
using sm80::ldmatrix_x4_trans;
using sm80::mma_16816;

std::atomic<uint64_t> g_launches{0};

template <class T>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

template <int BS, int D>
struct FlashTile {
  static constexpr int kWarps = BS / 16, kThreads = 32 * kWarps;
  static constexpr int kStride = D + 8;  // a padded row (16 bytes more): ldmatrix rows in distinct banks
  static constexpr int kTile = BS * kStride;
  static constexpr int kSmemBytes = 5 * kTile * 2;  // Q, K x2, V x2 (16-bit values)
};

template <class T, int BS, int D>
__global__ void __launch_bounds__(FlashTile<BS, D>::kThreads)
    flash_forward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
                         float* __restrict__ lse, int64_t H, int64_t nb, float scale_log2,
                         const int32_t* __restrict__ row_ptr, const int32_t* __restrict__ key_blocks) {
  using Tile = FlashTile<BS, D>;
  constexpr int kStride = Tile::kStride, kThreads = Tile::kThreads;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  T* sq = reinterpret_cast<T*>(smem_raw);  // [BS][kStride]
  T* sk = sq + Tile::kTile;                // [2][BS][kStride]
  T* sv = sk + 2 * Tile::kTile;            // [2][BS][kStride]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.x / nb, i = blockIdx.x % nb, h = bh % H;
  const int64_t head = bh * nb * BS * D;  // (b, h) in [B, H, T, D]
  const int32_t begin = row_ptr[h * nb + i], end = row_ptr[h * nb + i + 1];

  // A [BS, D] tile (rows of D values, contiguous in global memory) into padded shared rows.
  auto load_tile = [&](T* dst, const T* src) {
    constexpr int kChunks = BS * D / 8;  // 16-byte chunks
    for (int c = tid; c < kChunks; c += kThreads) {
      const int r = c / (D / 8), col = (c % (D / 8)) * 8;
      cp_async16(dst + r * kStride + col, src + static_cast<int64_t>(r) * D + col, true);
    }
  };
  auto load_kv = [&](int buf, int64_t j) {
    load_tile(sk + buf * Tile::kTile, k + head + j * BS * D);
    load_tile(sv + buf * Tile::kTile, v + head + j * BS * D);
  };
  load_tile(sq, q + head + i * BS * D);
  load_kv(0, key_blocks[begin]);  // every row lists its diagonal block: begin < end
  cp_async_commit();

  float acc[D / 8][4];  // O rows (16w + g, 16w + g + 8), columns 8·dn + 2t, +1
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[dn][e] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g, g + 8 (l: this thread's columns)
  uint32_t qf[D / 16][4];

  for (int32_t p = begin; p < end; ++p) {
    const int buf = (p - begin) & 1;
    if (p + 1 < end) load_kv(buf ^ 1, key_blocks[p + 1]);  // the next block, while this one is used
    cp_async_commit();
    cp_async_wait<1>();  // this block's copies (and Q's) have landed
    __syncthreads();
    if (p == begin) {
#pragma unroll
      for (int kd = 0; kd < D / 16; ++kd)
        ldmatrix_x4(qf[kd], sq + (warp * 16 + lane % 16) * kStride + kd * 16 + (lane / 16) * 8);
    }
    const T* kt = sk + buf * Tile::kTile;
    const T* vt = sv + buf * Tile::kTile;

    // S [16 rows, BS keys] of this warp: tile nt holds keys 8nt .. 8nt+7.
    float s[BS / 8][4];
#pragma unroll
    for (int nt = 0; nt < BS / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
#pragma unroll
    for (int kd = 0; kd < D / 16; ++kd)
#pragma unroll
      for (int nt = 0; nt < BS / 8; nt += 2) {
        // B (k = d, n = key) = K[key][d]: rows of K are n, non-transposed; matrices (nt, d lo),
        // (nt, d hi), (nt+1, d lo), (nt+1, d hi)
        uint32_t b[4];
        ldmatrix_x4(b, kt + ((nt + lane / 16) * 8 + lane % 8) * kStride + kd * 16 + ((lane / 8) % 2) * 8);
        const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
        mma_16816<T>(s[nt], qf[kd], b0);
        mma_16816<T>(s[nt + 1], qf[kd], b1);
      }

    // Scale (log2 domain), the causal mask on the diagonal block, the online softmax.
    const bool diagonal = key_blocks[p] == i;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = warp * 16 + g + 8 * hh;
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < BS / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nt][2 * hh + e];
          x = diagonal && nt * 8 + 2 * t + e > row ? -INFINITY : x * scale_log2;
          mx = fmaxf(mx, x);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[hh], mx);  // finite: key 0 of the block is allowed for every row
      const float alpha = exp2f(m[hh] - m_new);  // 0 on the first block (m = -inf)
      m[hh] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < BS / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nt][2 * hh + e];
          x = exp2f(x - m_new);
          sum += x;
        }
      l[hh] = alpha * l[hh] + sum;
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        acc[dn][2 * hh] *= alpha;
        acc[dn][2 * hh + 1] *= alpha;
      }
    }

    // O += P·V: the S accumulators of keys 16kk .. 16kk+15 are the A fragment of P.
#pragma unroll
    for (int kk = 0; kk < BS / 16; ++kk) {
      const uint32_t a[4] = {pack<T>(s[2 * kk][0], s[2 * kk][1]), pack<T>(s[2 * kk][2], s[2 * kk][3]),
                             pack<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dn = 0; dn < D / 8; dn += 2) {
        // B (k = key, n = d) = V[key][d]: rows of V are k, transposed; matrices (keys lo, dn),
        // (keys hi, dn), (keys lo, dn+1), (keys hi, dn+1)
        uint32_t b[4];
        ldmatrix_x4_trans(b, vt + (kk * 16 + ((lane / 8) % 2) * 8 + lane % 8) * kStride + (dn + lane / 16) * 8);
        const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
        mma_16816<T>(acc[dn], a, b0);
        mma_16816<T>(acc[dn + 1], a, b1);
      }
    }
    __syncthreads();  // every warp is done with this buffer before the next block's copy fills it
  }

  // O /= l, lse = ln 2 · (m + log2 l); l summed over the row's four threads first.
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float sum = l[hh];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = 1.f / sum;
    const int64_t row = i * BS + warp * 16 + g + 8 * hh;
    T* orow = o + head + row * D;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn)
      *reinterpret_cast<uint32_t*>(orow + dn * 8 + 2 * t) = pack<T>(acc[dn][2 * hh] * inv, acc[dn][2 * hh + 1] * inv);
    if (t == 0) lse[bh * nb * BS + row] = 0.69314718055994531f * (m[hh] + log2f(sum));
  }
}

template <class T, int BS, int D>
void launch(const FlashForward& f, cudaStream_t stream) {
  using Tile = FlashTile<BS, D>;
  constexpr auto kernel = &flash_forward_kernel<T, BS, D>;
  static const bool configured = [] {
    TS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
    return true;
  }();
  (void)configured;
  const int64_t blocks = f.B * f.H * f.nb;
  TS_CHECK(blocks <= INT32_MAX, ShapeError,
           "block_attention: " << blocks << " query blocks are too many for one launch");
  kernel<<<static_cast<unsigned>(blocks), Tile::kThreads, Tile::kSmemBytes, stream>>>(
      static_cast<const T*>(f.q), static_cast<const T*>(f.k), static_cast<const T*>(f.v), static_cast<T*>(f.o), f.lse,
      f.H, f.nb, static_cast<float>(f.scale * 1.4426950408889634), f.row_ptr, f.key_blocks);
  TS_CUDA_LAUNCH_CHECK("block_attention (tensor cores)");
  g_launches.fetch_add(1, std::memory_order_relaxed);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool flash_forward(const FlashForward& f, int device, cudaStream_t stream) {
  const char* path = std::getenv("TESSERA_ATTENTION_PATH");
  if (path && std::strcmp(path, "simt") == 0) return false;
  if (f.dtype != DType::bf16 && f.dtype != DType::f16) return false;
  if ((f.bs != 32 && f.bs != 64) || (f.D != 32 && f.D != 64 && f.D != 128)) return false;
  if (!aligned16(f.q) || !aligned16(f.k) || !aligned16(f.v) || !aligned16(f.o)) return false;
  int major = 0;
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 8) return false;
  auto with_d = [&](auto tag, auto bs) {
    using T = decltype(tag);
    constexpr int BS = decltype(bs)::value;
    if (f.D == 32) return launch<T, BS, 32>(f, stream);
    if (f.D == 64) return launch<T, BS, 64>(f, stream);
    return launch<T, BS, 128>(f, stream);
  };
  auto with_bs = [&](auto tag) {
    if (f.bs == 32) return with_d(tag, std::integral_constant<int, 32>{});
    return with_d(tag, std::integral_constant<int, 64>{});
  };
  if (f.dtype == DType::bf16)
    with_bs(__nv_bfloat16{});
  else
    with_bs(__half{});
  return true;
}

uint64_t flash_forward_launches() { return g_launches.load(std::memory_order_relaxed); }

}  // namespace cuda
}  // namespace tessera
