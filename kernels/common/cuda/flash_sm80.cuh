// What the tensor-core attention kernels (kernels/block_attention/flash_sm80.cu, forward, and
// kernels/block_attention_backward/flash_sm80_backward.cu) share: tiles of [BS, D] 16-bit values
// in padded shared rows, copied by cp.async, and fragment products over them with mma.sync
// (fragment layouts in mma_sm80.cuh). Rows padded by 8 values (16 bytes) put the 8 rows an
// ldmatrix reads in distinct banks.
//
// Keys in swizzled order (the dropout mask's sake). Dropout's Philox layout gives 4 consecutive
// keys of one query row one Philox block (attention_dropout.h). An S accumulator tile holds, per
// thread, columns 2t, 2t+1 of rows g and g+8; so the products that have keys as their n index
// (S = Q·Kᵀ, dP = dO·Vᵀ) and as their k index (P·V, dS·K) read the key rows of each 16-key chunk
// in the order key16(r, h) below: thread t then holds keys 4t .. 4t+3 of the chunk in its
// columns of the chunk's two 8-column tiles, one Philox block for four elements. Sums over keys
// do not depend on the order; the 8 rows of every ldmatrix stay in distinct bank groups (their
// keys are distinct mod 8 and a padded row is an odd number of 16-byte units for D = 32, 64 and
// 128). The dK/dV kernel, whose rows are keys, uses the same map on its rows (row r < 8 and r + 8
// of a warp's 16 are keys key16(r, 0) and key16(r, 1): one Philox block holds both).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/block_attention/attention_dropout.h"
#include "kernels/block_attention/flash_sm80.h"
#include "kernels/common/cuda/mma_sm80.cuh"

namespace tessera {
namespace cuda {
namespace flash {

template <int D>
constexpr int kStride = D + 8;

/// The key (0 .. 15) at row r (0 .. 7) of half h (0, 1) of a 16-key chunk in swizzled order:
/// r = 2t + e holds key 4t + e + 2·(h XOR t/2), so {key16(2t, h), key16(2t + 1, h)} over h are
/// 4t .. 4t+3, and the 8 keys of one half are distinct mod 8.
__device__ __forceinline__ int key16(int r, int h) { return 4 * (r >> 1) + (r & 1) + 2 * (h ^ ((r >> 2) & 1)); }

/// The key of a swizzled S accumulator s[nt][e] of this thread (t = lane % 4) within its tile:
/// chunk nt/2, half nt%2, row 2t + (e & 1).
__device__ __forceinline__ int swizzled_key(int nt, int e, int t) {
  return 16 * (nt / 2) + key16(2 * t + (e & 1), nt & 1);
}

/// 2^x by the multiprocessor's special function unit alone (ex2.approx.ftz): exp2f adds a
/// range check and two multiplies around it for results below 2^-126, which it returns as
/// subnormals; here they are 0 (a probability under 1e-38 beside the row's maximum, 1). Every
/// other result has the same bits as exp2f's; 2^-inf = 0 (the masked scores). The sm_90a
/// kernels use it, with the causal mask applied on diagonal blocks only (a branch the whole
/// warpgroup takes alike): per 64-key block of a warp (bf16, D 64, scripts/sass.py) the
/// forward's loop went from 490 to 278 instructions (with the scale folded into the subtraction
/// of the max), dK/dV's from 772 to about 390 (its wgmmas no longer serialized: C7520 gone) and
/// dQ's from 574 to about 310. The mma.sync kernels keep exp2f (with the bare ex2 one of their
/// dQ variants spilled).
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// Two f32 values as one register of two 16-bit values (the lower index in the low half).
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

/// Copies a [BS, D] tile (rows of D contiguous values, `ld` values apart) into padded shared rows;
/// the block's kThreads threads share the 16-byte chunks. Completes at the next cp_async_wait.
template <class T, int BS, int D, int kThreads>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int64_t ld) {
  constexpr int kChunks = BS * D / 8;
  for (int c = threadIdx.x; c < kChunks; c += kThreads) {
    const int r = c / (D / 8), col = (c % (D / 8)) * 8;
    sm80::cp_async16(dst + r * kStride<D> + col, src + r * ld + col, true);
  }
}

/// Whether TESSERA_ATTENTION_PATH=simt forces the scalar kernels (read on every call).
inline bool scalar_path_forced() {
  const char* path = std::getenv("TESSERA_ATTENTION_PATH");
  return path && std::strcmp(path, "simt") == 0;
}

/// What the tensor-core kernels' 16-byte copies need: the address, and every stride a multiple
/// of 8 16-bit values.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
inline bool aligned16(const FlashStrides& s) { return s.batch % 8 == 0 && s.head % 8 == 0 && s.token % 8 == 0; }

/// f (a FlashForward or FlashBackward) with its empty strides filled in as contiguous
/// [B, heads, T, D]: H heads for q and o (dO), H / G for k and v.
template <class Work>
Work with_contiguous_strides(Work f) {
  const int64_t T = f.nb * f.bs;
  if (f.qs.empty()) f.qs = FlashStrides::contiguous(f.H, T, f.D);
  if (f.kvs.empty()) f.kvs = FlashStrides::contiguous(f.H / f.G, T, f.D);
  if (f.os.empty()) f.os = FlashStrides::contiguous(f.H, T, f.D);
  return f;
}

/// Calls launch(T{}, BS, D, kDropout) for the instantiation the forward and backward kernels are
/// compiled for: T the 16-bit type of `dtype` (bf16, else f16), BS (bs 32, else 64) and D (32,
/// 64, else 128) std::integral_constant<int>s, kDropout a std::bool_constant.
template <class F>
void dispatch_flash(DType dtype, int bs, int64_t D, bool dropout, F&& launch) {
  auto with_dropout = [&](auto tag, auto bsc, auto dc) {
    if (dropout)
      launch(tag, bsc, dc, std::true_type{});
    else
      launch(tag, bsc, dc, std::false_type{});
  };
  auto with_d = [&](auto tag, auto bsc) {
    if (D == 32) return with_dropout(tag, bsc, std::integral_constant<int, 32>{});
    if (D == 64) return with_dropout(tag, bsc, std::integral_constant<int, 64>{});
    return with_dropout(tag, bsc, std::integral_constant<int, 128>{});
  };
  auto with_bs = [&](auto tag) {
    if (bs == 32) return with_d(tag, std::integral_constant<int, 32>{});
    return with_d(tag, std::integral_constant<int, 64>{});
  };
  if (dtype == DType::bf16)
    with_bs(__nv_bfloat16{});
  else
    with_bs(__half{});
}

/// The offset of (batch b, head h, token 0) in an operand of strides s (flash_sm80.h).
__device__ __forceinline__ int64_t at(const FlashStrides& s, int64_t b, int64_t h) { return b * s.batch + h * s.head; }

/// The tile row of A-fragment row rho (0 .. 15) of a warp's 16 rows: rho itself, or with
/// kSwizzle the swizzled key order (rows g and g + 8 of thread g: keys key16(g, 0), key16(g, 1)).
template <bool kSwizzle>
__device__ __forceinline__ int fragment_row(int rho) {
  return kSwizzle ? key16(rho % 8, rho / 8) : rho;
}

/// The A fragments [D/16][4] of the warp's 16 rows (row0 .. row0+15, in fragment_row order) of a
/// tile [*, D].
template <int D, bool kSwizzle = false>
__device__ __forceinline__ void load_a(uint32_t (&a)[D / 16][4], const void* tile, int row0) {
  const int lane = threadIdx.x % 32;
  const auto* p = static_cast<const uint16_t*>(tile);
  const int row = row0 + fragment_row<kSwizzle>(lane % 16);
#pragma unroll
  for (int kd = 0; kd < D / 16; ++kd) sm80::ldmatrix_x4(a[kd], p + row * kStride<D> + kd * 16 + (lane / 16) * 8);
}

/// acc [BS/8][4] = A·Bᵀ: A the warp's fragments [16, D], B a tile [BS, D] (its rows the columns
/// of the product: n = row of B, k = d; with kSwizzle in swizzled key order, see swizzled_key).
template <class T, int BS, int D, bool kSwizzle = false>
__device__ __forceinline__ void product_nt(float (&acc)[BS / 8][4], const uint32_t (&a)[D / 16][4], const T* b) {
  const int lane = threadIdx.x % 32;
  // ldmatrix row of this lane: matrix lane/8 is (tile nt + lane/16, d half (lane/8) % 2)
  const int brow = kSwizzle ? key16(lane % 8, lane / 16) : (lane / 16) * 8 + lane % 8;
#pragma unroll
  for (int nt = 0; nt < BS / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
#pragma unroll
  for (int kd = 0; kd < D / 16; ++kd)
#pragma unroll
    for (int nt = 0; nt < BS / 8; nt += 2) {
      uint32_t f[4];
      sm80::ldmatrix_x4(f, b + (nt * 8 + brow) * kStride<D> + kd * 16 + ((lane / 8) % 2) * 8);
      const uint32_t b0[2] = {f[0], f[1]}, b1[2] = {f[2], f[3]};
      sm80::mma_16816<T>(acc[nt], a[kd], b0);
      sm80::mma_16816<T>(acc[nt + 1], a[kd], b1);
    }
}

/// acc [D/8][4] += X·B: X [16, BS] the warp's rows as accumulators x [BS/8][4] (rounded to T:
/// the accumulators of 16 columns are an A fragment), B a tile [BS, D] (its rows the k index; with
/// kSwizzle in the swizzled key order of x's columns).
template <class T, int BS, int D, bool kSwizzle = false>
__device__ __forceinline__ void product_nn(float (&acc)[D / 8][4], const float (&x)[BS / 8][4], const T* b) {
  const int lane = threadIdx.x % 32;
  // ldmatrix row of this lane: matrix lane/8 is (k half (lane/8) % 2, d tile dn + lane/16)
  const int brow = kSwizzle ? key16(lane % 8, (lane / 8) % 2) : ((lane / 8) % 2) * 8 + lane % 8;
#pragma unroll
  for (int kk = 0; kk < BS / 16; ++kk) {
    const uint32_t a[4] = {pack<T>(x[2 * kk][0], x[2 * kk][1]), pack<T>(x[2 * kk][2], x[2 * kk][3]),
                           pack<T>(x[2 * kk + 1][0], x[2 * kk + 1][1]), pack<T>(x[2 * kk + 1][2], x[2 * kk + 1][3])};
#pragma unroll
    for (int dn = 0; dn < D / 8; dn += 2) {
      uint32_t f[4];
      sm80::ldmatrix_x4_trans(f, b + (kk * 16 + brow) * kStride<D> + (dn + lane / 16) * 8);
      const uint32_t b0[2] = {f[0], f[1]}, b1[2] = {f[2], f[3]};
      sm80::mma_16816<T>(acc[dn], a, b0);
      sm80::mma_16816<T>(acc[dn + 1], a, b1);
    }
  }
}

/// Stores the warp's accumulators [16 rows, D] (fragment rows g, g + 8, in fragment_row order
/// from row0) times `scale` into rows of D values, `ld` apart, at `dst`.
template <class T, int D, bool kSwizzle = false>
__device__ __forceinline__ void store_rows(T* dst, int64_t ld, const float (&acc)[D / 8][4], int row0, float scale) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    T* row = dst + (row0 + fragment_row<kSwizzle>(g + 8 * hh)) * ld;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn)
      *reinterpret_cast<uint32_t*>(row + dn * 8 + 2 * t) =
          pack<T>(acc[dn][2 * hh] * scale, acc[dn][2 * hh + 1] * scale);
  }
}

/// Word w (0 .. 3, a run-time value) of a Philox block, by selects (an indexed load would put the
/// block in local memory).
__device__ __forceinline__ uint32_t word(const philox::Block& b, int w) {
  const uint32_t lo = w & 1 ? b.w[1] : b.w[0], hi = w & 1 ? b.w[3] : b.w[2];
  return w & 2 ? hi : lo;
}

/// The dropout factors of a swizzled S tile's thread elements (query rows r0 + g, r0 + g + 8 of
/// row_elem, keys of the tile from key0): z[nt][e] = scale if kept, else 0. row_elem(row) is the
/// stream index of (bh, row, key 0) = (bh·T + row)·T; one Philox block per (row, 16-key chunk).
template <int BS>
__device__ __forceinline__ void dropout_rows(float (&z)[BS / 8][4], const AttentionDropout& d, uint64_t row_elem0,
                                             uint64_t row_elem1, int64_t key0) {
  const int t = threadIdx.x % 4;
  const float scale = static_cast<float>(d.scale);
#pragma unroll
  for (int c = 0; c < BS / 16; ++c)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const philox::Block b = d.block_of((hh ? row_elem1 : row_elem0) + key0 + 16 * c + 4 * t);
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) z[2 * c + h][2 * hh + e] = d.keeps(word(b, key16(2 * t + e, h) % 4)) ? scale : 0.f;
    }
}

/// The dropout factors of the dK/dV kernel's thread elements: its rows are keys (swizzled rows
/// key16(g, 0), key16(g, 1) of the warp's 16 from key0), columns the queries 8nt + 2t + e of the
/// tile from query0: z[nt][2·hh + e] for key row hh, query column e. The Philox block of (query,
/// 4-key group) holds the keys of lanes g and g XOR 1 (lane XOR 4, the same t): each of the two
/// draws the block of one of the two queries 2t + e (e = g mod 2) and hands the other lane its
/// words by a shuffle, one block per four elements. bhT = bh·T.
template <int BS>
__device__ __forceinline__ void dropout_cols(float (&z)[BS / 8][4], const AttentionDropout& d, uint64_t bhT,
                                             int64_t T, int64_t query0, int64_t key0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, own = g & 1;
  const int64_t group = key0 + 4 * (g / 2);  // the 4 keys holding key16(g, ·) and key16(g ^ 1, ·)
  const float scale = static_cast<float>(d.scale);
#pragma unroll
  for (int nt = 0; nt < BS / 8; ++nt) {
    const uint64_t q = static_cast<uint64_t>(query0 + nt * 8 + 2 * t + own);
    const philox::Block b = d.block_of((bhT + q) * static_cast<uint64_t>(T) + group);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const uint32_t mine = word(b, key16(g, hh) % 4), theirs = word(b, key16(g ^ 1, hh) % 4);
      const uint32_t got = __shfl_xor_sync(0xffffffffu, theirs, 4);  // the partner's block, my keys
      const float zm = d.keeps(mine) ? scale : 0.f, zg = d.keeps(got) ? scale : 0.f;
      z[nt][2 * hh] = own ? zg : zm;  // selects, not an index (z stays in registers)
      z[nt][2 * hh + 1] = own ? zm : zg;
    }
  }
}

}  // namespace flash
}  // namespace cuda
}  // namespace tessera
