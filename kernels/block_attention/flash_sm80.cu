// The tensor-core forward of block_attention (see flash_sm80.h): FlashAttention-2's design on
// mma.sync.m16n8k16, over the layout's key blocks only.
//
// One thread block per (b·h, query block i) of BS rows; warp w owns query rows 16w .. 16w+15.
// Q_i [BS, D] is loaded once (its fragments stay in registers); the listed key blocks j of
// (h, i) stream through two shared-memory buffers of K_j and V_j [BS, D] (cp.async, the next
// block copied while this one is used). Per key block, per row t of the warp:
//   S_t = scale·log2(e) · Q_t·K_jᵀ (−inf where key > query on the diagonal block)
//   m' = max(m, max S_t),  α = 2^(m − m'),  P_t = 2^(S_t − m')   (P rounded to q's dtype)
//   l = α·l + Σ P_t,  O_t = α·O_t + (z ⊙ P_t)·V_j,  m = m'
// and at the end O_t /= l (and ·= 1/(1 − p) with dropout), lse_t = ln 2 · (m + log2 l). z is the
// dropout mask (1 without dropout; l sums the undropped P). S and P never leave the registers: the
// accumulators of S·(16 keys) are exactly the A fragments of P·V (flash-attention-2's trick). Keys
// are visited in the swizzled order of flash_sm80.cuh (one Philox block per thread per row and 16
// keys). Deterministic: each output is summed by one thread in the layout's key-block order.
#include "kernels/block_attention/flash_sm80.h"
#include "kernels/block_attention/flash_sm90.h"

#include <atomic>
#include <cmath>

#include "core/cuda/check.cuh"
#include "core/error.h"
#include "kernels/common/cuda/flash_sm80.cuh"

namespace tessera {
namespace cuda {
namespace {

using flash::kStride;
using flash::load_a;
using flash::load_tile;
using flash::pack;
using flash::product_nn;
using flash::product_nt;
using flash::swizzled_key;
using sm80::cp_async_commit;
using sm80::cp_async_wait;

std::atomic<uint64_t> g_launches{0};

template <int BS, int D>
struct FlashTile {
  static constexpr int kWarps = BS / 16, kThreads = 32 * kWarps;
  static constexpr int kTile = BS * kStride<D>;
  static constexpr int kSmemBytes = 5 * kTile * 2;  // Q, K x2, V x2 (16-bit values)
};

template <class T, int BS, int D, bool kDropout>
__global__ void __launch_bounds__(FlashTile<BS, D>::kThreads)
    flash_forward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
                         FlashStrides qs, FlashStrides kvs, FlashStrides os,
                         float* __restrict__ lse, int64_t H, int64_t G, int64_t nb, float scale_log2,
                         const int32_t* __restrict__ row_ptr, const int32_t* __restrict__ key_blocks,
                         AttentionDropout drop, const int32_t* __restrict__ base) {
  using Tile = FlashTile<BS, D>;
  constexpr int kThreads = Tile::kThreads, kTile = Tile::kTile;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  T* sq = reinterpret_cast<T*>(smem_raw);  // [BS][kStride]
  T* sk = sq + kTile;                      // [2][BS][kStride]
  T* sv = sk + 2 * kTile;                  // [2][BS][kStride]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.x / nb, i = blockIdx.x % nb, h = bh % H, T_ = nb * BS;
  // Token 0 of (b, h) in q and o, of (b, h / G) in k and v (G query heads per key/value head).
  const T* qh = q + flash::at(qs, bh / H, h);
  const T* kh = k + flash::at(kvs, bh / H, h / G);
  const T* vh = v + flash::at(kvs, bh / H, h / G);
  T* oh = o + flash::at(os, bh / H, h);
  const int32_t begin = row_ptr[h * nb + i], end = row_ptr[h * nb + i + 1];
  auto load_kv = [&](int buf, int64_t j) {
    load_tile<T, BS, D, kThreads>(sk + buf * kTile, kh + j * BS * kvs.token, kvs.token);
    load_tile<T, BS, D, kThreads>(sv + buf * kTile, vh + j * BS * kvs.token, kvs.token);
  };
  load_tile<T, BS, D, kThreads>(sq, qh + i * BS * qs.token, qs.token);
  load_kv(0, key_blocks[begin]);  // every row lists its diagonal block: begin < end
  cp_async_commit();
  drop = drop.with_base(base);
  // Dropout stream index of (bh, row, key 0) for the thread's rows 16w + g, + 8.
  const uint64_t row_elem0 = static_cast<uint64_t>(bh * T_ + i * BS + warp * 16 + g) * T_;
  const uint64_t row_elem1 = row_elem0 + 8 * static_cast<uint64_t>(T_);

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
    if (p == begin) load_a<D>(qf, sq, warp * 16);
    const T* kt = sk + buf * kTile;
    const T* vt = sv + buf * kTile;

    // S [16 rows, BS keys] of this warp, keys in swizzled order.
    float s[BS / 8][4];
    product_nt<T, BS, D, true>(s, qf, kt);

    // Scale (log2 domain), the causal mask on the diagonal block, the online softmax.
    const int64_t j = key_blocks[p];
    const bool diagonal = j == i;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = warp * 16 + g + 8 * hh;
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < BS / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nt][2 * hh + e];
          x = diagonal && swizzled_key(nt, e, t) > row ? -INFINITY : x * scale_log2;
          mx = fmaxf(mx, x);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[hh], mx);      // finite: key 0 of the block is allowed for every row
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
    if constexpr (kDropout) {  // z ⊙ P (the 1/(1 − p) is applied once at the end)
      float z[BS / 8][4];
      flash::dropout_rows<BS>(z, drop, row_elem0, row_elem1, j * BS);
#pragma unroll
      for (int nt = 0; nt < BS / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = z[nt][e] != 0.f ? s[nt][e] : 0.f;
    }

    // O += P·V: the S accumulators of keys 16kk .. 16kk+15 are the A fragment of P.
    product_nn<T, BS, D, true>(acc, s, vt);
    __syncthreads();  // every warp is done with this buffer before the next block's copy fills it
  }

  // O /= l (·= 1/(1 − p)), lse = ln 2 · (m + log2 l); l summed over the row's four threads first.
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float sum = l[hh];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = (kDropout ? static_cast<float>(drop.scale) : 1.f) / sum;
    const int64_t row = i * BS + warp * 16 + g + 8 * hh;
    T* orow = oh + row * os.token;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn)
      *reinterpret_cast<uint32_t*>(orow + dn * 8 + 2 * t) = pack<T>(acc[dn][2 * hh] * inv, acc[dn][2 * hh + 1] * inv);
    if (t == 0) lse[bh * nb * BS + row] = 0.69314718055994531f * (m[hh] + log2f(sum));
  }
}

template <class T, int BS, int D, bool kDropout>
void launch(const FlashForward& f, cudaStream_t stream) {
  using Tile = FlashTile<BS, D>;
  constexpr auto kernel = &flash_forward_kernel<T, BS, D, kDropout>;
  static const bool configured = [] {
    TS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
    return true;
  }();
  (void)configured;
  const int64_t blocks = f.B * f.H * f.nb;
  TS_CHECK(blocks <= INT32_MAX, ShapeError,
           "block_attention: " << blocks << " query blocks are too many for one launch");
  kernel<<<static_cast<unsigned>(blocks), Tile::kThreads, Tile::kSmemBytes, stream>>>(
      static_cast<const T*>(f.q), static_cast<const T*>(f.k), static_cast<const T*>(f.v), static_cast<T*>(f.o), f.qs,
      f.kvs, f.os, f.lse, f.H, f.G, f.nb, static_cast<float>(f.scale * 1.4426950408889634), f.row_ptr, f.key_blocks, f.dropout, f.base);
  TS_CUDA_LAUNCH_CHECK("block_attention (tensor cores)");
  g_launches.fetch_add(1, std::memory_order_relaxed);
}


}  // namespace


bool flash_forward(const FlashForward& given, int device, cudaStream_t stream) {
  if (flash::scalar_path_forced()) return false;
  const FlashForward f = flash::with_contiguous_strides(given);
  if (f.dtype != DType::bf16 && f.dtype != DType::f16) return false;
  if ((f.bs != 32 && f.bs != 64) || (f.D != 32 && f.D != 64 && f.D != 128)) return false;
  using flash::aligned16;
  if (!aligned16(f.q) || !aligned16(f.k) || !aligned16(f.v) || !aligned16(f.o)) return false;
  if (!aligned16(f.qs) || !aligned16(f.kvs) || !aligned16(f.os)) return false;
  int major = 0;
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 8) return false;
#ifdef TESSERA_HAVE_SM90A
  if (sm90::flash_forward_supported(f, device) && sm90::flash_forward(f, stream)) {
    g_launches.fetch_add(1, std::memory_order_relaxed);  // a tensor-core forward too
    return true;
  }
#endif
  flash::dispatch_flash(f.dtype, f.bs, f.D, f.dropout.on(), [&](auto tag, auto bs, auto d, auto dropout) {
    launch<decltype(tag), decltype(bs)::value, decltype(d)::value, decltype(dropout)::value>(f, stream);
  });
  return true;
}

uint64_t flash_forward_launches() { return g_launches.load(std::memory_order_relaxed); }

uint64_t flash_forward_sm90_launches() {
#ifdef TESSERA_HAVE_SM90A
  return sm90::flash_forward_launches();
#else
  return 0;
#endif
}

}  // namespace cuda
}  // namespace tessera
