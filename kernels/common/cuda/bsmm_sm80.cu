// The sm_80 tensor-core kernels of bsmm, bsmm_dx and bsmm_dw (see bsmm_sm80.h).
//
// Gather product (fwd and dx). One thread block per (output block column o, tile of kBM rows), in
// the order of work_item (bsmm_store.cuh):
//
//   out[m0 .. m0+kBM, o-block] = sum over the list of o of gate[k] · A[rows, in(k)-block] · B(k)
//
// is a GEMM whose reduction runs over the list's blocks. Each pipeline stage holds kNB blocks
// (kKT = kNB·bs reduction columns: one block of 32 or 64, two of 16, four of 8, so that small
// blocks fill the 16-deep mma steps): the A strips [kBM, bs] of those blocks side by side and
// their weight blocks stacked, both brought in with 16-byte cp.async into a ring of kStages
// buffers. Four warps each own a kWTM × kWTN piece of the output tile in f32 registers. The gate
// scales the weight fragments (one rounding, as T(gate·w)). A list whose length is not a
// multiple of kNB ends in zero-filled blocks; rows past n are zero-filled and not stored.
//
// Block gradient (dW). One thread block per group of up to 128/bs stored blocks of one block row
// r: the X strip [n, bs] is read once for all of them (the dY strips of their columns side by
// side make a [n, 128] operand), and the sum runs over n in stages of 32 rows:
//
//   dw[k0 + g] = X[:, r-block]ᵀ · dY[:, c_g-block]        (g < count)
//
// bs 8 pads the 16-row mma tile with rows that are computed and dropped. With a gate the store
// scales each block by it and dgate = sum P ⊙ w is summed from the accumulators (the epilogue).
//
// tf32 (f32 operands): the same tiles in f32, fragments read with 32-bit shared loads and rounded
// to tf32, m16n8k8 products.
#include "kernels/common/cuda/bsmm_sm80.h"

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "core/error.h"
#include "core/tensor.h"
#include "kernels/common/cuda/blas.h"
#include "kernels/common/cuda/block_reduce.cuh"
#include "kernels/common/cuda/block_sparse.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/bsmm_store.cuh"
#include "kernels/common/cuda/mma_sm80.cuh"

namespace tessera {
namespace cuda {
namespace sm80 {
namespace {

constexpr int kThreads = 128;  // four warps

template <class T>
constexpr bool kIsF32 = std::is_same_v<T, float>;

template <class T>
__device__ __forceinline__ float to_float(T v) {
  return to_acc(v);
}

template <int M, int N>
__device__ __forceinline__ void zero(float (&acc)[M][N][4]) {
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int j = 0; j < N; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
}

// ---- gather product (fwd, dx) ----

template <class T, int BS, bool kTrans>
struct GatherTile {
  static constexpr int kVec = 16 / sizeof(T);             // elements per 16-byte copy
  static constexpr int kBM = 128;                         // rows of A per thread block
  static constexpr int kKT = BS >= 32 ? BS : 32;          // reduction columns per stage
  static constexpr int kNB = kKT / BS;                    // blocks per stage
  static constexpr int kWarpsN = BS == 64 ? 2 : 1;
  static constexpr int kWarpsM = 4 / kWarpsN;
  static constexpr int kWTM = kBM / kWarpsM;              // 64 or 32
  static constexpr int kWTN = BS / kWarpsN;               // 32, 32, 16, 8
  static constexpr int kMT = kWTM / 16, kNT = kWTN / 8;   // mma tiles per warp
  static constexpr int kPitchA = kKT + kVec;              // As [kBM][kPitchA] (row m, column kk)
  // Bs: fwd [kKT][kPitchB] (row kk, column j); dx [BS][kPitchB] (row i = output column, column kk)
  static constexpr int kBRows = kTrans ? BS : kKT;
  static constexpr int kPitchB = kTrans ? kKT + kVec : (BS == 8 && !kIsF32<T> ? 8 : BS + kVec);
  static constexpr int kStageElems = kBM * kPitchA + kBRows * kPitchB;
  static constexpr int kStageBytes = kStageElems * static_cast<int>(sizeof(T));
  static constexpr int kStages = 3 * kStageBytes <= 100 * 1024 ? 4 : 3;
  static constexpr int kSmemBytes = kStages * kStageBytes;
};

// A convolution's rows (conv_rows_kernel): rows_of[t·n + q] is the A row that product row q reads
// at tap t, -1 for padding.
template <class T, class TO, int BS, bool kTrans, bool kConv>
__global__ void __launch_bounds__(kThreads) gather_kernel(GatherProduct p, int taps_, const int32_t* rows_of) {
  using Tile = GatherTile<T, BS, kTrans>;
  constexpr int kVec = Tile::kVec, kBM = Tile::kBM, kKT = Tile::kKT, kNB = Tile::kNB;
  constexpr int kPitchA = Tile::kPitchA, kPitchB = Tile::kPitchB, kStages = Tile::kStages;
  constexpr int kMT = Tile::kMT, kNT = Tile::kNT, kWTM = Tile::kWTM, kWTN = Tile::kWTN;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);

  const int tiles_m = static_cast<int>((p.n + kBM - 1) / kBM);
  int oi, mt;
  work_item(blockIdx.x, tiles_m, p.outs, oi, mt);
  // A convolution's list has each block's entry once per tap (entry q: tap q % taps of the block at
  // list position q / taps, weight block k·taps + tap of w [nnz, taps, bs, bs]).
  const int taps = kConv ? taps_ : 1;
  const int o = p.work[3 * oi], begin = p.work[3 * oi + 1] * taps, end = p.work[3 * oi + 2] * taps;
  const int64_t m0 = static_cast<int64_t>(mt) * kBM;
  const int steps = (end - begin + kNB - 1) / kNB;
  const T* a = static_cast<const T*>(p.a);
  const T* w = static_cast<const T*>(p.w);
  const T* gate = static_cast<const T*>(p.gate);

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / Tile::kWarpsN, wn = warp % Tile::kWarpsN;

  // The block index k of list position q (a convolution's: k·taps + tap of entry q).
  auto block_at = [&](int q) {
    const int pq = q / taps;
    return (p.list ? __ldg(p.list + pq) : pq) * taps + (q - pq * taps);
  };

  // Issues the copies of stage `s` (list positions begin + s·kNB ..) into buffer s % kStages.
  // Each thread copies one fixed 16-byte column chunk of the A strips (block b, chunk ch) down
  // the rows, and at most one weight block's chunks, so it looks up one or two block indices per
  // stage.
  constexpr int kChunks = BS / kVec;           // 16-byte copies per block row
  constexpr int kPerRow = kNB * kChunks;       // per row of the stage's A strips (divides kThreads)
  constexpr int kWChunks = BS * kChunks;       // per weight block
  static_assert(kThreads % kPerRow == 0, "A chunks must map to fixed threads");
  const int a_b = (tid % kPerRow) / kChunks, a_ch = tid % kChunks;
  const int w_b = (tid / kWChunks) % kNB;      // the weight block this thread copies (if any)
  auto load_stage = [&](int s) {
    T* As = smem + (s % kStages) * Tile::kStageElems;
    T* Bs = As + kBM * kPitchA;
    const int q0 = begin + s * kNB;
    {
      const int q = q0 + a_b;
      const bool block_valid = q < end;
      const int64_t col = block_valid ? static_cast<int64_t>(__ldg(p.list_in + q / taps)) * BS + a_ch * kVec : 0;
      const int tap = q % taps;
      for (int row = tid / kPerRow; row < kBM; row += kThreads / kPerRow) {
        const int64_t grow = m0 + row;
        // A's row: the product's own; a convolution's the row of the table (the input row the
        // output row reads at the tap; dx: the output row that reads the input row), -1: zeros
        int64_t arow = grow;
        if constexpr (kConv)
          if (block_valid && grow < p.n) arow = __ldg(rows_of + static_cast<int64_t>(tap) * p.n + grow);
        const bool valid = block_valid && grow < p.n && arow >= 0;
        cp_async16(As + row * kPitchA + a_b * BS + a_ch * kVec, valid ? a + arow * p.a_cols + col : a, valid);
      }
    }
    const int qw = q0 + w_b;
    const bool w_valid = qw < end;
    const T* wk = w_valid ? w + static_cast<int64_t>(block_at(qw)) * BS * BS : w;
    for (int idx = tid; idx < kNB * kWChunks; idx += kThreads) {
      const int e = (idx % kWChunks) / kChunks, ch = idx % kChunks;  // row e of the block, chunk ch
      // fwd: row kk = b·BS + e of [kKT][BS]; dx: row i = e, columns b·BS .. of [BS][kKT]
      T* dst = kTrans ? Bs + e * kPitchB + w_b * BS + ch * kVec : Bs + (w_b * BS + e) * kPitchB + ch * kVec;
      cp_async16(dst, wk + e * BS + ch * kVec, w_valid);
    }
  };

  float acc[kMT][kNT][4];
  zero(acc);

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load_stage(s);
    cp_async_commit();
  }

  const int g = lane / 4, t = lane % 4;
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage s landed for every thread; stage s-1's buffer is free
    if (s + kStages - 1 < steps) load_stage(s + kStages - 1);
    cp_async_commit();

    const T* As = smem + (s % kStages) * Tile::kStageElems;
    const T* Bs = As + kBM * kPitchA;
    float gv[kNB];
#pragma unroll
    for (int b = 0; b < kNB; ++b) {
      const int q = begin + s * kNB + b;
      gv[b] = gate && q < end ? to_float(gate[block_at(q)]) : 1.f;
    }

    if constexpr (!kIsF32<T>) {
#pragma unroll
      for (int ks = 0; ks < kKT / 16; ++ks) {
        uint32_t af[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
          ldmatrix_x4(af[mt], As + (wm * kWTM + mt * 16 + lane % 16) * kPitchA + ks * 16 + (lane / 16) * 8);
        uint32_t bf[kNT][2];
        if constexpr (kNT == 1) {
          uint32_t r[2];
          const int l = lane % 16;
          if constexpr (kTrans) {
            ldmatrix_x2(r, Bs + (wn * kWTN + l % 8) * kPitchB + ks * 16 + (l / 8) * 8);
          } else {
            ldmatrix_x2_trans(r, Bs + (ks * 16 + l) * kPitchB + wn * kWTN);
          }
          bf[0][0] = r[0];
          bf[0][1] = r[1];
        } else {
#pragma unroll
          for (int np = 0; np < kNT / 2; ++np) {
            uint32_t r[4];
            const int j = lane / 8;
            if constexpr (kTrans) {
              ldmatrix_x4(r, Bs + (wn * kWTN + np * 16 + lane % 8 + 8 * (j / 2)) * kPitchB + ks * 16 + 8 * (j % 2));
            } else {
              ldmatrix_x4_trans(r, Bs + (ks * 16 + lane % 8 + 8 * (j % 2)) * kPitchB + wn * kWTN + np * 16 + 8 * (j / 2));
            }
            bf[2 * np][0] = r[0];
            bf[2 * np][1] = r[1];
            bf[2 * np + 1][0] = r[2];
            bf[2 * np + 1][1] = r[3];
          }
        }
        if (gate) {
          const float g0 = gv[(ks * 16) / BS], g1 = gv[(ks * 16 + 8) / BS];
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
            bf[nt][0] = scale_pair<T>(bf[nt][0], g0);
            bf[nt][1] = scale_pair<T>(bf[nt][1], g1);
          }
        }
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) mma_16816<T>(acc[mt][nt], af[mt], bf[nt]);
      }
    } else {
      // tf32: A (m, kk) at As[m][kk]; B (kk, n) at Bs[kk][n] (fwd) or Bs[n][kk] (dx).
      auto b_at = [&](int kk, int n) -> float {
        return kTrans ? Bs[n * kPitchB + kk] : Bs[kk * kPitchB + n];
      };
#pragma unroll
      for (int ks = 0; ks < kKT / 8; ++ks) {
        uint32_t af[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          const float* ap = As + (wm * kWTM + mt * 16 + g) * kPitchA + ks * 8 + t;
          af[mt][0] = to_tf32(ap[0]);
          af[mt][1] = to_tf32(ap[8 * kPitchA]);
          af[mt][2] = to_tf32(ap[4]);
          af[mt][3] = to_tf32(ap[8 * kPitchA + 4]);
        }
        const float gs = gv[(ks * 8) / BS];
        uint32_t bf[kNT][2];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const int n = wn * kWTN + nt * 8 + g;
          bf[nt][0] = to_tf32(gs * b_at(ks * 8 + t, n));
          bf[nt][1] = to_tf32(gs * b_at(ks * 8 + t + 4, n));
        }
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) mma_1688_tf32(acc[mt][nt], af[mt], bf[nt]);
      }
    }
  }
  cp_async_wait<0>();

  if (p.bias) {  // + bias[col] on every row, to the f32 sums before their one rounding
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int64_t col = static_cast<int64_t>(o) * BS + wn * kWTN + nt * 8 + 2 * t;
      const float2 b = p.bias_f32 ? bias_pair(static_cast<const float*>(p.bias), col, p.out_cols)
                                  : bias_pair(static_cast<const TO*>(p.bias), col, p.out_cols);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        acc[mt][nt][0] += b.x, acc[mt][nt][1] += b.y;
        acc[mt][nt][2] += b.x, acc[mt][nt][3] += b.y;
      }
    }
  }
  TO* out = static_cast<TO*>(p.out);
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int64_t col = static_cast<int64_t>(o) * BS + wn * kWTN + nt * 8 + 2 * t;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = m0 + wm * kWTM + mt * 16 + g + 8 * h;
        if (row < p.n) store_pair(out + row * p.out_cols + col, acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1], p.accumulate);
      }
    }
}

// ---- block gradient (dW) ----

template <class T, int BS>
struct GradientTile {
  static constexpr int kVec = 16 / sizeof(T);
  static constexpr int kM = BS >= 16 ? BS : 16;         // mma rows (i); bs 8 pads to 16
  static constexpr int kG = 128 / BS;                   // blocks per thread block (dw_group_size)
  static constexpr int kN = kG * BS;                    // 128 columns: the group's dY strips
  static constexpr int kKT = 32;                        // rows of X / dY per stage
  static constexpr int kWarpsM = BS == 64 ? 2 : 1;
  static constexpr int kWarpsN = 4 / kWarpsM;
  static constexpr int kWTM = kM / kWarpsM;             // 32 or kM
  static constexpr int kWTN = kN / kWarpsN;             // 64 or 32
  static constexpr int kMT = kWTM / 16, kNT = kWTN / 8;
  static constexpr int kPitchA = kM + kVec;             // As [kKT][kPitchA]: row = token, column i
  static constexpr int kPitchB = kN + kVec;             // Bs [kKT][kPitchB]: row = token, column g·BS + j
  static constexpr int kStageElems = kKT * (kPitchA + kPitchB);
  static constexpr int kStages = 4;
  static constexpr int kSmemBytes = kStages * kStageElems * static_cast<int>(sizeof(T));
};

template <class T, class TO, int BS, bool kConv>
__global__ void __launch_bounds__(kThreads)
    gradient_kernel(BlockGradient p, int taps_, const int32_t* rows_of, int part_steps, float* partial) {
  using Tile = GradientTile<T, BS>;
  constexpr int kVec = Tile::kVec, kKT = Tile::kKT, kG = Tile::kG, kStages = Tile::kStages;
  constexpr int kPitchA = Tile::kPitchA, kPitchB = Tile::kPitchB;
  constexpr int kMT = Tile::kMT, kNT = Tile::kNT, kWTM = Tile::kWTM, kWTN = Tile::kWTN;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  __shared__ int cols[kG];

  // A convolution's thread blocks are (part, group, tap), tap fastest: X's rows are those the
  // output rows read at the tap, over part `part` of the k-steps (all of them when partial is
  // null; else the sums go to partial[part], f32, for sum_parts).
  const int taps = kConv ? taps_ : 1, tap = blockIdx.x % taps, group = blockIdx.x / taps % p.groups;
  const int part = blockIdx.x / taps / p.groups;
  const int k0 = p.group[2 * group], count = p.group[2 * group + 1];
  const int64_t r = p.block_row[k0];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / Tile::kWarpsN, wn = warp % Tile::kWarpsN;
  if (tid < kG) cols[tid] = tid < count ? p.block_col[k0 + tid] : 0;
  __syncthreads();
  const T* x = static_cast<const T*>(p.x);
  const T* dy = static_cast<const T*>(p.dy);
  const int all_steps = static_cast<int>((p.n + kKT - 1) / kKT);
  const int first = partial ? part * part_steps : 0;
  const int steps = partial ? min(part_steps, all_steps - first) : all_steps;  // from step `first`

  auto load_stage = [&](int s) {  // s: this thread block's step (k-step first + s)
    T* As = smem + (s % kStages) * Tile::kStageElems;
    T* Bs = As + kKT * kPitchA;
    const int64_t t0 = static_cast<int64_t>(first + s) * kKT;
    constexpr int kChunks = BS / kVec;
    for (int idx = tid; idx < kKT * kChunks; idx += kThreads) {
      const int row = idx / kChunks, ch = idx % kChunks;
      int64_t xrow = t0 + row;
      if constexpr (kConv)
        if (xrow < p.n) xrow = __ldg(rows_of + static_cast<int64_t>(tap) * p.n + xrow);
      const bool valid = t0 + row < p.n && xrow >= 0;
      const T* src = valid ? x + xrow * p.C + r * BS + ch * kVec : x;
      cp_async16(As + row * kPitchA + ch * kVec, src, valid);
    }
    for (int idx = tid; idx < kKT * kG * kChunks; idx += kThreads) {
      const int row = idx / (kG * kChunks), rem = idx % (kG * kChunks), b = rem / kChunks, ch = rem % kChunks;
      if (b >= count) continue;  // columns of absent blocks are computed from stale data and dropped
      const bool valid = t0 + row < p.n;
      const T* src = valid ? dy + (t0 + row) * p.K + static_cast<int64_t>(cols[b]) * BS + ch * kVec : dy;
      cp_async16(Bs + row * kPitchB + b * BS + ch * kVec, src, valid);
    }
  };

  float acc[kMT][kNT][4];
  zero(acc);

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load_stage(s);
    cp_async_commit();
  }
  const int g = lane / 4, t = lane % 4;
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (s + kStages - 1 < steps) load_stage(s + kStages - 1);
    cp_async_commit();
    const T* As = smem + (s % kStages) * Tile::kStageElems;
    const T* Bs = As + kKT * kPitchA;
    if constexpr (!kIsF32<T>) {
#pragma unroll
      for (int ks = 0; ks < kKT / 16; ++ks) {
        const int j = lane / 8;
        uint32_t af[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)  // A (i, token) from As[token][i]
          ldmatrix_x4_trans(af[mt], As + (ks * 16 + lane % 8 + 8 * (j / 2)) * kPitchA + wm * kWTM + mt * 16 + 8 * (j % 2));
        uint32_t bf[kNT][2];
#pragma unroll
        for (int np = 0; np < kNT / 2; ++np) {  // B (token, col) from Bs[token][col]
          uint32_t rr[4];
          ldmatrix_x4_trans(rr, Bs + (ks * 16 + lane % 8 + 8 * (j % 2)) * kPitchB + wn * kWTN + np * 16 + 8 * (j / 2));
          bf[2 * np][0] = rr[0];
          bf[2 * np][1] = rr[1];
          bf[2 * np + 1][0] = rr[2];
          bf[2 * np + 1][1] = rr[3];
        }
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) mma_16816<T>(acc[mt][nt], af[mt], bf[nt]);
      }
    } else {
#pragma unroll
      for (int ks = 0; ks < kKT / 8; ++ks) {
        uint32_t af[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          const float* ap = As + (ks * 8 + t) * kPitchA + wm * kWTM + mt * 16 + g;
          af[mt][0] = to_tf32(ap[0]);
          af[mt][1] = to_tf32(ap[8]);
          af[mt][2] = to_tf32(ap[4 * kPitchA]);
          af[mt][3] = to_tf32(ap[4 * kPitchA + 8]);
        }
        uint32_t bf[kNT][2];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const float* bp = Bs + (ks * 8 + t) * kPitchB + wn * kWTN + nt * 8 + g;
          bf[nt][0] = to_tf32(bp[0]);
          bf[nt][1] = to_tf32(bp[4 * kPitchB]);
        }
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) mma_1688_tf32(acc[mt][nt], af[mt], bf[nt]);
      }
    }
  }
  cp_async_wait<0>();

  // The store, scaled by the block's gate when gated, with dgate = sum P ⊙ w summed from the
  // same registers: per lane over its elements of each of the warp's kLB blocks (lb: the block
  // kWTN/BS columns hold), then over the warp by a fixed shuffle tree, then over the block's
  // warps (two at bs 64) in order.
  constexpr int kLB = kWTN / BS > 0 ? kWTN / BS : 1;
  const bool gated = p.gate != nullptr;
  const T* w = static_cast<const T*>(p.w);
  float gsum[kLB];
#pragma unroll
  for (int lb = 0; lb < kLB; ++lb) gsum[lb] = 0.f;
  TO* dw = static_cast<TO*>(p.dw);
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int col = wn * kWTN + nt * 8 + 2 * t, b = col / BS, j = col % BS;
      if (b >= count) continue;
      const float scale = gated ? load_one(static_cast<const T*>(p.gate) + k0 + b) : 1.f;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = wm * kWTM + mt * 16 + g + 8 * h;
        if (i >= BS) continue;
        const int64_t at = (((static_cast<int64_t>(k0) + b) * taps + tap) * BS + i) * BS + j;
        const float v0 = acc[mt][nt][2 * h], v1 = acc[mt][nt][2 * h + 1];
        if (partial) {  // no gate, no accumulate (conv_gradient_supported)
          *reinterpret_cast<float2*>(partial + static_cast<int64_t>(part) * p.nnz * BS * BS + at) = make_float2(v0, v1);
          continue;
        }
        if (gated) {
          const float2 wv = load_pair(w + at);
          gsum[nt * 8 / BS] += v0 * wv.x + v1 * wv.y;
        }
        store_pair(dw + at, scale * v0, scale * v1, p.accumulate);
      }
    }
  if (!gated) return;
  __shared__ float sums[kThreads / 32][kLB];
#pragma unroll
  for (int lb = 0; lb < kLB; ++lb) {
    const float v = warp_reduce(gsum[lb], SumOp{});
    if (lane == 0) sums[warp][lb] = v;
  }
  __syncthreads();
  if (tid < count) {  // block b = tid: columns b·BS.. of warp column wn, its lb-th block
    const int wn_b = tid * BS / kWTN, lb = tid * BS % kWTN / BS;
    float v = 0.f;
#pragma unroll
    for (int m = 0; m < Tile::kWarpsM; ++m) v += sums[m * Tile::kWarpsN + wn_b][lb];
    store_one(static_cast<TO*>(p.dgate) + k0 + tid, v);
  }
}

// ---- dispatch ----

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool dtype_ok(DType in, DType out) {
  return (in == DType::bf16 || in == DType::f16 || (in == DType::f32 && allow_tf32())) &&
         (out == in || out == DType::f32);
}

bool capability_ok(int device) {
  int major = 0;
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 8;
}

/// Raises Kernel's dynamic shared-memory limit to `bytes` on the current device, once per device.
template <auto Kernel>
void allow_smem(int bytes) {
  static std::atomic<uint64_t> done{0};
  int device = 0;
  TS_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t{1} << (device % 64);
  if (done.load(std::memory_order_acquire) & bit) return;
  TS_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.fetch_or(bit, std::memory_order_release);
}

template <class F>
void dispatch_types(DType in, DType out, F&& f) {
  auto with_out = [&](auto tin) {
    using T = typename decltype(tin)::type;
    if (out == DType::f32) return f(tin, TypeTag<float>{});
    return f(tin, tin);
  };
  switch (in) {
    case DType::bf16: return with_out(TypeTag<__nv_bfloat16>{});
    case DType::f16: return with_out(TypeTag<__half>{});
    case DType::f32: return f(TypeTag<float>{}, TypeTag<float>{});
    default: break;
  }
  TS_THROW(DTypeError, "bsmm tensor-core kernels: no kernel for dtype " << in);
}

std::atomic<uint64_t> g_launches{0};
std::atomic<uint64_t> g_conv_launches{0};

}  // namespace

uint64_t launch_count() { return g_launches.load(std::memory_order_relaxed); }
uint64_t conv_launch_count() { return g_conv_launches.load(std::memory_order_relaxed); }

bool gather_supported(const GatherProduct& p, int device) {
  return dtype_ok(p.in_dtype, p.out_dtype) && aligned16(p.a) && aligned16(p.w) && aligned16(p.out) &&
         aligned16(p.bias) && capability_ok(device);
}

bool gradient_supported(const BlockGradient& g, int device) {
  return dtype_ok(g.in_dtype, g.out_dtype) && aligned16(g.x) && aligned16(g.dy) && aligned16(g.dw) &&
         capability_ok(device);
}

void gather_product(const GatherProduct& p, cudaStream_t stream) {
  if (p.n == 0 || p.outs == 0) return;
  dispatch_types(p.in_dtype, p.out_dtype, [&](auto tin, auto tout) {
    using T = typename decltype(tin)::type;
    using TO = typename decltype(tout)::type;
    dispatch_block_size(p.bs, p.transpose_w ? "bsmm_dx" : "bsmm", [&](auto bs) {
      constexpr int BS = decltype(bs)::value;
      auto launch = [&](auto trans) {
        constexpr bool kTrans = decltype(trans)::value;
        using Tile = GatherTile<T, BS, kTrans>;
        const int64_t tiles_m = (p.n + Tile::kBM - 1) / Tile::kBM, blocks = tiles_m * p.outs;
        TS_CHECK(blocks <= INT32_MAX, ShapeError, "bsmm: " << p.n << " rows are too many for one launch");
        constexpr auto kernel = &gather_kernel<T, TO, BS, kTrans, false>;
        allow_smem<kernel>(Tile::kSmemBytes);
        kernel<<<static_cast<unsigned>(blocks), kThreads, Tile::kSmemBytes, stream>>>(p, 1, nullptr);
        TS_CUDA_LAUNCH_CHECK((kTrans ? "bsmm_dx" : "bsmm"));
        g_launches.fetch_add(1, std::memory_order_relaxed);
      };
      if (p.transpose_w) {
        launch(std::true_type{});
      } else {
        launch(std::false_type{});
      }
    });
  });
}

void block_gradient(const BlockGradient& g, cudaStream_t stream) {
  if (g.groups == 0) return;
  dispatch_types(g.in_dtype, g.out_dtype, [&](auto tin, auto tout) {
    using T = typename decltype(tin)::type;
    using TO = typename decltype(tout)::type;
    dispatch_block_size(g.bs, "bsmm_dw", [&](auto bs) {
      constexpr int BS = decltype(bs)::value;
      using Tile = GradientTile<T, BS>;
      constexpr auto kernel = &gradient_kernel<T, TO, BS, false>;
      allow_smem<kernel>(Tile::kSmemBytes);
      kernel<<<static_cast<unsigned>(g.groups), kThreads, Tile::kSmemBytes, stream>>>(g, 1, nullptr, 0, nullptr);
      TS_CUDA_LAUNCH_CHECK("bsmm_dw");
      g_launches.fetch_add(1, std::memory_order_relaxed);
    });
  });
}

namespace {

// rows_of[t·rows + q] = input_row(q, t) (from_output) or output_row(q, t), -1 for padding.
__global__ void conv_rows_kernel(ConvIndex ci, int64_t rows, bool from_output, int32_t* rows_of) {
  const int64_t total = rows * ci.taps;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / rows, q = e % rows;
    rows_of[e] = static_cast<int32_t>(from_output ? ci.input_row(q, t) : ci.output_row(q, t));
  }
}

// The table of conv_rows_kernel for `rows` product rows, from the device's pool (freed in stream
// order after the kernels that read it): the rows each tap reads are computed once per call
// instead of per stage and block.
Tensor conv_rows(const ConvIndex& ci, int64_t rows, bool from_output, int64_t a_rows, cudaStream_t stream) {
  TS_CHECK(a_rows < INT32_MAX && rows * ci.taps < INT32_MAX, ShapeError,
           "bsconv: " << rows << " rows × " << ci.taps << " taps are too many for the sm_80 kernels' row table");
  int device = 0;
  TS_CUDA_CHECK(cudaGetDevice(&device));
  Tensor table = empty({rows * ci.taps}, TensorOptions(DType::i32).device(Device::cuda(device)));
  const int64_t total = rows * ci.taps;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 4096));
  conv_rows_kernel<<<blocks, 256, 0, stream>>>(ci, rows, from_output, static_cast<int32_t*>(table.data_ptr()));
  TS_CUDA_LAUNCH_CHECK("bsconv (row table)");
  return table;
}

}  // namespace

bool conv_supported(const GatherProduct& p, int device) {
  return p.gate == nullptr && !p.accumulate && gather_supported(p, device);
}

bool conv_gradient_supported(const BlockGradient& g, int device) {
  return g.gate == nullptr && !g.accumulate && !g.transposed && gradient_supported(g, device);
}

void gather_conv(const GatherProduct& p, const ConvIndex& ci, cudaStream_t stream) {
  if (p.n == 0 || p.outs == 0) return;
  dispatch_types(p.in_dtype, p.out_dtype, [&](auto tin, auto tout) {
    using T = typename decltype(tin)::type;
    using TO = typename decltype(tout)::type;
    dispatch_block_size(p.bs, p.transpose_w ? "bsconv_dx" : "bsconv", [&](auto bs) {
      constexpr int BS = decltype(bs)::value;
      auto launch = [&](auto trans) {
        constexpr bool kTrans = decltype(trans)::value;
        using Tile = GatherTile<T, BS, kTrans>;
        const int64_t tiles_m = (p.n + Tile::kBM - 1) / Tile::kBM, blocks = tiles_m * p.outs;
        TS_CHECK(blocks <= INT32_MAX, ShapeError,
                 (kTrans ? "bsconv_dx" : "bsconv") << ": too many rows for one launch");
        constexpr auto kernel = &gather_kernel<T, TO, BS, kTrans, true>;
        allow_smem<kernel>(Tile::kSmemBytes);
        // dx reads dy's rows (output positions), the forward x's (input positions)
        const int64_t a_rows = p.n / (kTrans ? ci.in_positions : ci.out_positions) *
                               (kTrans ? ci.out_positions : ci.in_positions);
        const Tensor rows_of = conv_rows(ci, p.n, !kTrans, a_rows, stream);
        kernel<<<static_cast<unsigned>(blocks), kThreads, Tile::kSmemBytes, stream>>>(
            p, static_cast<int>(ci.taps), static_cast<const int32_t*>(rows_of.data_ptr()));
        TS_CUDA_LAUNCH_CHECK((kTrans ? "bsconv_dx" : "bsconv"));
        g_launches.fetch_add(1, std::memory_order_relaxed);
        g_conv_launches.fetch_add(1, std::memory_order_relaxed);
      };
      if (p.transpose_w) {
        launch(std::true_type{});
      } else {
        launch(std::false_type{});
      }
    });
  });
}

// Parts of the k-steps for conv_gradient: enough that (block group, tap, part) thread blocks fill
// the multiprocessors four times, each part at least 8 steps of 32 positions (a fixed rule of the
// layout, the shape and the device: the same bits on every run). Without parts a 3x3 filter over
// a few groups gives fewer thread blocks than multiprocessors, each summing every position.
int conv_gradient_parts(int64_t blocks, int steps, int device) {
  int sms = 0;
  TS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  int parts = 1;
  while (parts < 64 && blocks * parts < 4 * sms && steps / (2 * parts) >= 8) parts *= 2;
  return parts;
}

void conv_gradient(const BlockGradient& g, const ConvIndex& ci, cudaStream_t stream) {
  if (g.groups == 0) return;
  const int64_t blocks = static_cast<int64_t>(g.groups) * ci.taps;
  const int steps = static_cast<int>((g.n + 31) / 32);  // GradientTile::kKT positions per step
  int device = 0;
  TS_CUDA_CHECK(cudaGetDevice(&device));
  const int chosen = conv_gradient_parts(blocks, steps, device);
  const int part_steps = (steps + chosen - 1) / chosen;
  const int parts = (steps + part_steps - 1) / part_steps;  // every part has steps
  TS_CHECK(blocks * parts <= INT32_MAX, ShapeError, "bsconv_dw: too many (block group, tap) pairs for one launch");
  dispatch_types(g.in_dtype, g.out_dtype, [&](auto tin, auto tout) {
    using T = typename decltype(tin)::type;
    using TO = typename decltype(tout)::type;
    dispatch_block_size(g.bs, "bsconv_dw", [&](auto bs) {
      constexpr int BS = decltype(bs)::value;
      using Tile = GradientTile<T, BS>;
      static_assert(Tile::kKT == 32, "conv_gradient counts steps of 32 positions");
      constexpr auto kernel = &gradient_kernel<T, TO, BS, true>;
      allow_smem<kernel>(Tile::kSmemBytes);
      const Tensor rows_of = conv_rows(ci, g.n, /*from_output=*/true, g.n / ci.out_positions * ci.in_positions, stream);
      const int64_t elems = g.nnz * BS * BS;
      Tensor partial;  // freed in stream order after the kernels below
      if (parts > 1) partial = empty({parts * elems}, TensorOptions(DType::f32).device(Device::cuda(device)));
      kernel<<<static_cast<unsigned>(blocks * parts), kThreads, Tile::kSmemBytes, stream>>>(
          g, static_cast<int>(ci.taps), static_cast<const int32_t*>(rows_of.data_ptr()), part_steps,
          parts > 1 ? static_cast<float*>(partial.data_ptr()) : nullptr);
      TS_CUDA_LAUNCH_CHECK("bsconv_dw");
      if (parts > 1) {
        const int threads = 256;
        const int sum_blocks = static_cast<int>(std::min<int64_t>((elems / 2 + threads - 1) / threads, 4096));
        sum_parts<TO><<<sum_blocks, threads, 0, stream>>>(static_cast<const float*>(partial.data_ptr()),
                                                          static_cast<TO*>(g.dw), elems, parts);
        TS_CUDA_LAUNCH_CHECK("bsconv_dw (sum of parts)");
      }
      g_launches.fetch_add(1, std::memory_order_relaxed);
      g_conv_launches.fetch_add(1, std::memory_order_relaxed);
    });
  });
}

}  // namespace sm80
}  // namespace cuda
}  // namespace tessera
