// The group normalization of layer_norm (one group per row) and sparse_layer_norm (S groups of
// G = C / S features per row, optional fused ReLU), forward and backward, on the GPU. The math
// is that of kernels/common/normalize.h and the CPU backward kernels; statistics are in acc_t
// (f32; f64 for f64), which is also the dtype of the mean/rstd tensors.
//
//   cuda::normalize_forward<T>(x, gamma, beta, y, mean, rstd, units, G, S, eps, relu, stream, op);
//   cuda::normalize_backward<T>(g, x, mean, rstd, y_or_null, gamma, dx, dgamma, dbeta, rows, G, S,
//                               device, stream, op);
//
// Thread mapping. A unit (row u / S, segment u % S: G contiguous elements) is read in packs of
// 16 bytes, kPack<T> elements (f32 4, f64 2, bf16/f16 8). A team of `size` threads normalizes
// one unit; its thread `rank` keeps packs q = rank + i·size (i < kIters) in registers, so x (and
// g) are read from memory once. Teams are
//   - a warp (8 per block of 256 threads) for units of up to 32·8 packs forward (f32 1024,
//     bf16 2048, f64 512 elements) and 16 elements per lane backward (f64: 8; f32 and bf16
//     512 elements, f64 256);
//   - the block, threads = packs / kIters rounded up to a warp, for up to 4096 packs forward
//     (1024 threads) and 8192 elements backward (512 threads; f64 4096);
//   - beyond that, generic kernels that read the unit again for each pass.
// Loads and stores are 128-bit when G % kPack == 0 and every pointer is 16-byte aligned, else
// element by element. Both put the same element in the same register, so every sum, and every
// result, has the same bits either way. All sums are in a fixed order that depends on the
// shape only (no atomics): results are reproducible.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "core/tensor.h"
#include "kernels/common/cuda/block_reduce.cuh"
#include "kernels/common/cuda/dtype.cuh"

namespace tessera {
namespace cuda {
namespace norm {

// gh = g·gamma rounded on its own (no fused multiply-add with what it is added to or subtracted
// from): both backward passes then see the same gh, so gh − mean(gh) is exactly 0 for a group
// of one element, whose dx must be 0 (rstd = 1/sqrt(eps) would magnify any difference).
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

template <class T>
constexpr int kPack = static_cast<int>(16 / sizeof(T));  ///< elements per 16-byte pack

/// kPack<T> elements, moved with one 128-bit load or store when aligned.
template <class T>
struct alignas(16) Pack {
  T v[kPack<T>];
};

/// Sums of the kPack<T> columns of a pack, in acc_t.
template <class T>
struct alignas(16) AccPack {
  acc_t<T> v[kPack<T>];
};

constexpr int kWarpsPerBlock = 8;    ///< warp teams per block
constexpr int kFwdWarpIters = 8;     ///< packs per lane, forward warp teams
constexpr int kFwdBlockIters = 4;    ///< packs per thread, forward block teams
constexpr int kFwdMaxThreads = 1024;
constexpr int kBwdMaxThreads = 512;
/// Packs per thread backward: 16 elements (f64: 8) of g and x, and their column sums.
template <class T>
constexpr int kBwdIters = sizeof(T) == 8 ? 4 : 16 / kPack<T>;  // f32 4, f64 4, bf16/f16 2

template <class T>
__device__ __forceinline__ T zero_of() {
  return from_acc<T>(acc_t<T>(0));
}

/// Pack q of a row of n elements: one 128-bit load when kVec (n % kPack == 0, row aligned),
/// else element by element, zeros past n. The caller checks q·kPack < n.
template <bool kVec, class T>
__device__ __forceinline__ Pack<T> load_pack(const T* row, int q, int n) {
  constexpr int V = kPack<T>;
  Pack<T> r;
  if constexpr (kVec) {
    const uint4 w = *reinterpret_cast<const uint4*>(row + q * V);
    memcpy(&r, &w, sizeof(r));
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) r.v[e] = q * V + e < n ? row[q * V + e] : zero_of<T>();
  }
  return r;
}

template <bool kVec, class T>
__device__ __forceinline__ void store_pack(T* row, int q, int n, const Pack<T>& r) {
  constexpr int V = kPack<T>;
  if constexpr (kVec) {
    uint4 w;
    memcpy(&w, &r, sizeof(r));
    *reinterpret_cast<uint4*>(row + q * V) = w;
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e)
      if (q * V + e < n) row[q * V + e] = r.v[e];
  }
}

/// The threads that share a unit: a warp (kWarp: blockDim.x / 32 teams per block) or the block.
template <bool kWarp>
struct Team {
  __device__ static int rank() { return static_cast<int>(kWarp ? threadIdx.x & 31 : threadIdx.x); }
  __device__ static int size() { return static_cast<int>(kWarp ? 32 : blockDim.x); }
  __device__ static int index() { return static_cast<int>(kWarp ? threadIdx.x >> 5 : 0); }  ///< in the block
  __device__ static int count() { return static_cast<int>(kWarp ? blockDim.x >> 5 : 1); }   ///< per block
  /// Every thread of the team gets the same bits (fixed tree).
  template <class V, class Op>
  __device__ static V reduce(V v, Op op, V identity) {
    if constexpr (kWarp) {
      (void)identity;
      return warp_reduce(v, op);
    } else {
      return block_reduce(v, op, identity);
    }
  }
};

}  // namespace norm

// Forward of unit u: x[u·G, (u+1)·G), parameters gamma, beta [(u % S)·G, ...).
// Shifted two-pass statistics (k = x_0 keeps a large common offset harmless, as on the CPU):
//   d = x − k,  m = mean(d),  var = mean((d − m)²),  rstd = 1/sqrt(var + eps) (in f64, then acc_t)
//   mean = k + m,  y = (d − m)·rstd·gamma + beta,  y = max(y, 0) with relu
// Team t of the grid takes units t, t + teams, ...; its threads keep their packs of x in
// registers through the mean, variance and output passes. Team sums: thread's own elements in
// (pack, element) order, then the fixed warp/block tree.
template <class T, int kIters, bool kWarp, bool kVec>
__global__ void __launch_bounds__(kWarp ? 32 * norm::kWarpsPerBlock : norm::kFwdMaxThreads)
    normalize_forward_kernel(const T* x, const T* gamma, const T* beta, T* y, acc_t<T>* mean, acc_t<T>* rstd,
                             int64_t units, int gs, int64_t nseg, double eps, bool relu) {
  using A = acc_t<T>;
  using Team = norm::Team<kWarp>;
  constexpr int V = norm::kPack<T>;
  const int rank = Team::rank(), size = Team::size();
  const int64_t teams = int64_t{gridDim.x} * Team::count();
  for (int64_t u = int64_t{blockIdx.x} * Team::count() + Team::index(); u < units; u += teams) {
    const T* xs = x + u * gs;
    norm::Pack<T> xv[kIters];  // packs rank + i·size of x
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int q = rank + i * size;
      xv[i] = q * V < gs ? norm::load_pack<kVec>(xs, q, gs) : norm::Pack<T>{};
    }
    const A k = to_acc(xs[0]);
    A s1 = 0;
#pragma unroll
    for (int i = 0; i < kIters; ++i)
#pragma unroll
      for (int e = 0; e < V; ++e)
        if ((rank + i * size) * V + e < gs) s1 += to_acc(xv[i].v[e]) - k;
    const A m = Team::reduce(s1, SumOp{}, A(0)) / A(gs);
    A s2 = 0;
#pragma unroll
    for (int i = 0; i < kIters; ++i)
#pragma unroll
      for (int e = 0; e < V; ++e)
        if ((rank + i * size) * V + e < gs) {
          const A c = (to_acc(xv[i].v[e]) - k) - m;
          s2 += c * c;
        }
    const A var = Team::reduce(s2, SumOp{}, A(0)) / A(gs);
    const A rs = static_cast<A>(1.0 / ::sqrt(static_cast<double>(var) + eps));
    if (rank == 0) {
      mean[u] = k + m;
      rstd[u] = rs;
    }
    const int64_t p = (u % nseg) * gs;
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int q = rank + i * size;
      if (q * V >= gs) continue;
      norm::Pack<T> gm{}, bt{}, out;
      if (gamma) gm = norm::load_pack<kVec>(gamma + p, q, gs);
      if (beta) bt = norm::load_pack<kVec>(beta + p, q, gs);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        A v = ((to_acc(xv[i].v[e]) - k) - m) * rs;
        if (gamma) v *= to_acc(gm.v[e]);
        if (beta) v += to_acc(bt.v[e]);
        if (relu) v = v > A(0) ? v : A(0);
        out.v[e] = from_acc<T>(v);
      }
      norm::store_pack<kVec>(y + u * gs, q, gs, out);
    }
  }
}

// Forward for units too long for registers: one block per unit, threads_for(G) threads, thread
// t on j = t, t + blockDim, ...; the same math, reading x once per pass.
template <class T>
__global__ void normalize_forward_generic_kernel(const T* x, const T* gamma, const T* beta, T* y, acc_t<T>* mean,
                                                 acc_t<T>* rstd, int64_t units, int64_t gs, int64_t nseg,
                                                 double eps, bool relu) {
  using A = acc_t<T>;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const T* xs = x + u * gs;
    const int64_t p = (u % nseg) * gs;
    const A k = to_acc(xs[0]);
    A s1 = 0;
    for (int64_t j = threadIdx.x; j < gs; j += blockDim.x) s1 += to_acc(xs[j]) - k;
    const A m = block_sum(s1) / A(gs);
    A s2 = 0;
    for (int64_t j = threadIdx.x; j < gs; j += blockDim.x) {
      const A c = (to_acc(xs[j]) - k) - m;
      s2 += c * c;
    }
    const A var = block_sum(s2) / A(gs);
    const A rs = static_cast<A>(1.0 / ::sqrt(static_cast<double>(var) + eps));
    if (threadIdx.x == 0) {
      mean[u] = k + m;
      rstd[u] = rs;
    }
    for (int64_t j = threadIdx.x; j < gs; j += blockDim.x) {
      A v = ((to_acc(xs[j]) - k) - m) * rs;
      if (gamma) v *= to_acc(gamma[p + j]);
      if (beta) v += to_acc(beta[p + j]);
      if (relu) v = v > A(0) ? v : A(0);
      y[u * gs + j] = from_acc<T>(v);
    }
  }
}

namespace norm {

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }  // null too

/// Calls f(std::integral_constant<int, k>{}) for the smallest k of 1, 2, 4, ..., kMax with k >= n.
template <int kMax, int k = 1, class F>
void with_iters(int64_t n, F&& f) {
  if constexpr (k >= kMax) {
    f(std::integral_constant<int, kMax>{});
  } else {
    if (n <= k)
      f(std::integral_constant<int, k>{});
    else
      with_iters<kMax, 2 * k>(n, f);
  }
}

template <class F>
void with_vec(bool vec, F&& f) {
  if (vec)
    f(std::true_type{});
  else
    f(std::false_type{});
}

/// Threads of a block team: `packs` / `iters` rounded up to a warp.
inline int team_threads(int64_t packs, int iters) {
  return static_cast<int>((packs + 32 * iters - 1) / (32 * iters) * 32);
}

}  // namespace norm

template <class T>
void normalize_forward(const T* x, const T* gamma, const T* beta, T* y, acc_t<T>* mean, acc_t<T>* rstd,
                       int64_t units, int64_t gs, int64_t nseg, double eps, bool relu, cudaStream_t stream,
                       const char* op) {
  using namespace norm;
  if (units == 0) return;
  constexpr int V = kPack<T>;
  const int64_t packs = (gs + V - 1) / V;
  const bool vec = gs % V == 0 && aligned16(x) && aligned16(gamma) && aligned16(beta) && aligned16(y);
  const int n = static_cast<int>(std::min<int64_t>(gs, INT32_MAX));  // gs itself on the register paths
  if (packs <= 32 * kFwdWarpIters) {
    with_vec(vec, [&](auto kv) {
      with_iters<kFwdWarpIters>((packs + 31) / 32, [&](auto ki) {
        normalize_forward_kernel<T, decltype(ki)::value, true, decltype(kv)::value>
            <<<blocks_for(units, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream>>>(x, gamma, beta, y, mean, rstd,
                                                                                   units, n, nseg, eps, relu);
      });
    });
  } else if (packs <= int64_t{kFwdMaxThreads} * kFwdBlockIters) {
    with_vec(vec, [&](auto kv) {
      normalize_forward_kernel<T, kFwdBlockIters, false, decltype(kv)::value>
          <<<grid_for_rows(units), team_threads(packs, kFwdBlockIters), 0, stream>>>(x, gamma, beta, y, mean, rstd,
                                                                                    units, n, nseg, eps, relu);
    });
  } else {
    normalize_forward_generic_kernel<<<grid_for_rows(units), threads_for(gs), 0, stream>>>(
        x, gamma, beta, y, mean, rstd, units, gs, nseg, eps, relu);
  }
  TS_CUDA_LAUNCH_CHECK(op);
}

// Backward, pass 1. Block (b, s) takes rows [b·R, min((b+1)·R, rows)) of segment s; team w of
// the block takes rows b·R + w, + teams, ... (warp teams: 8 per block; a block team: 1). With
// xhat = (x − mean)·rstd, gz = relu ? g·[y > 0] : g and gh = gz·gamma (gz without gamma), per row:
//   dx = rstd · (gh − mean_G(gh) − xhat · mean_G(gh · xhat))
// A thread keeps its packs of gz and x in registers (read once) and adds, row after row, gz·xhat
// and gz into the sums of its columns: in registers for a block team, in its warp's slice of
// shared memory ([teams, 2, ⌈G/kPack⌉·kPack] of acc_t) for warp teams, whose slices are then
// added in warp order. Out: partial[b, 0, sG + j] = Σ gz·xhat, partial[b, 1, sG + j] = Σ gz.
template <class T, int kIters, bool kWarp, bool kVec>
__global__ void __launch_bounds__(kWarp ? 32 * norm::kWarpsPerBlock : norm::kBwdMaxThreads)
    normalize_backward_kernel(const T* g, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd, const T* y,
                              const T* gamma, T* dx, acc_t<T>* partial, int64_t rows, int gs, int64_t nseg,
                              int64_t per_block, int64_t nblocks) {
  using A = acc_t<T>;
  using AP = norm::AccPack<T>;
  using Team = norm::Team<kWarp>;
  constexpr int V = norm::kPack<T>;
  extern __shared__ __align__(16) unsigned char norm_smem[];
  const int rank = Team::rank(), size = Team::size(), team = Team::index(), teams = Team::count();
  const int gp = (gs + V - 1) / V;                               // packs per row
  AP* sums = reinterpret_cast<AP*>(norm_smem) + team * 2 * gp;  // warp teams: [2, gp] of this warp
  AP reg[kWarp ? 1 : 2 * kIters];                                // block team: [2, kIters]
  const int64_t c = gs * nseg;
  for (int64_t bid = blockIdx.x; bid < nblocks * nseg; bid += gridDim.x) {
    const int64_t b = bid / nseg, s = bid % nseg, p = s * gs;
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int q = rank + i * size;
      if constexpr (kWarp) {
        if (q < gp) sums[q] = sums[gp + q] = AP{};
      } else {
        reg[i] = reg[kIters + i] = AP{};
      }
    }
    const int64_t r1 = ::min(rows, (b + 1) * per_block);
    for (int64_t r = b * per_block + team; r < r1; r += teams) {
      const int64_t u = r * nseg + s, off = u * gs;
      norm::Pack<T> gv[kIters], xv[kIters];  // gz, x
#pragma unroll
      for (int i = 0; i < kIters; ++i) {
        const int q = rank + i * size;
        gv[i] = xv[i] = norm::Pack<T>{};
        if (q >= gp) continue;
        gv[i] = norm::load_pack<kVec>(g + off, q, gs);
        xv[i] = norm::load_pack<kVec>(x + off, q, gs);
        if (y) {  // ReLU first: the gradient reaches z only where y = max(z, 0) > 0
          const norm::Pack<T> yv = norm::load_pack<kVec>(y + off, q, gs);
#pragma unroll
          for (int e = 0; e < V; ++e)
            if (!(to_acc(yv.v[e]) > A(0))) gv[i].v[e] = norm::zero_of<T>();
        }
      }
      const A mu = mean[u], rs = rstd[u];
      TwoSums<A> t{A(0), A(0)};  // Σ gh, Σ gh·xhat
#pragma unroll
      for (int i = 0; i < kIters; ++i) {
        const int q = rank + i * size;
        if (q >= gp) continue;
        norm::Pack<T> gm{};
        if (gamma) gm = norm::load_pack<kVec>(gamma + p, q, gs);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          if (q * V + e >= gs) continue;
          const A xh = (to_acc(xv[i].v[e]) - mu) * rs, gz = to_acc(gv[i].v[e]);
          const A gh = gamma ? norm::mul_rn(gz, to_acc(gm.v[e])) : gz;
          t.a += gh;
          t.b += gh * xh;
        }
      }
      t = Team::reduce(t, AddTwoSums{}, TwoSums<A>{A(0), A(0)});
      const A m_gh = t.a / A(gs), m_gh_xh = t.b / A(gs);
#pragma unroll
      for (int i = 0; i < kIters; ++i) {
        const int q = rank + i * size;
        if (q >= gp) continue;
        norm::Pack<T> gm{}, out;
        if (gamma) gm = norm::load_pack<kVec>(gamma + p, q, gs);
        AP sg, sb;  // the column sums of pack q
        if constexpr (kWarp) {
          sg = sums[q];
          sb = sums[gp + q];
        } else {
          sg = reg[i];
          sb = reg[kIters + i];
        }
#pragma unroll
        for (int e = 0; e < V; ++e) {  // past G (element-by-element path): gz = 0, never stored
          const A xh = (to_acc(xv[i].v[e]) - mu) * rs, gz = to_acc(gv[i].v[e]);
          const A gh = gamma ? norm::mul_rn(gz, to_acc(gm.v[e])) : gz;
          out.v[e] = from_acc<T>(rs * (gh - m_gh - xh * m_gh_xh));
          sg.v[e] += gz * xh;
          sb.v[e] += gz;
        }
        norm::store_pack<kVec>(dx + off, q, gs, out);
        if constexpr (kWarp) {
          sums[q] = sg;
          sums[gp + q] = sb;
        } else {
          reg[i] = sg;
          reg[kIters + i] = sb;
        }
      }
    }
    A* pg = partial + b * 2 * c + p;  // [G] of partial[b, 0]
    A* pb = pg + c;                   // [G] of partial[b, 1]
    if constexpr (kWarp) {            // partial[b, h, p + j] = slice 0 + slice 1 + ... (left to right)
      __syncthreads();
      const A* all = reinterpret_cast<const A*>(norm_smem);
      for (int k = threadIdx.x; k < 2 * gs; k += blockDim.x) {
        const int h = k < gs ? 0 : 1, j = k - h * gs;
        A v = all[h * gp * V + j];
        for (int w = 1; w < teams; ++w) v += all[(2 * w + h) * gp * V + j];
        (h == 0 ? pg : pb)[j] = v;
      }
      __syncthreads();  // before the next block index clears the slices
    } else {
#pragma unroll
      for (int i = 0; i < kIters; ++i)
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const int j = (rank + i * size) * V + e;
          if (j >= gs) continue;
          pg[j] = reg[i].v[e];
          pb[j] = reg[kIters + i].v[e];
        }
    }
  }
}

// Backward pass 1 for units too long for registers: block (b, s) (threads_for(G) threads, thread
// t on j = t, t + blockDim, ...) walks its rows one by one, reading g, x (and y) twice per row,
// with each column's sums owned by one thread (rows added in order): the same math and partials.
template <class T>
__global__ void normalize_backward_generic_kernel(const T* g, const T* x, const acc_t<T>* mean,
                                                  const acc_t<T>* rstd, const T* y, const T* gamma, T* dx,
                                                  acc_t<T>* partial, int64_t rows, int64_t gs, int64_t nseg,
                                                  int64_t per_block, int64_t nblocks) {
  using A = acc_t<T>;
  const int64_t c = gs * nseg;
  for (int64_t bid = blockIdx.x; bid < nblocks * nseg; bid += gridDim.x) {
    const int64_t b = bid / nseg, s = bid % nseg, p = s * gs;
    A* pg = partial + b * 2 * c + p;  // [G] of dgamma
    A* pb = pg + c;                   // [G] of dbeta
    for (int64_t j = threadIdx.x; j < gs; j += blockDim.x) pg[j] = pb[j] = A(0);
    const int64_t r1 = ::min(rows, (b + 1) * per_block);
    for (int64_t r = b * per_block; r < r1; ++r) {
      const int64_t u = r * nseg + s, off = u * gs;
      const A mu = mean[u], rs = rstd[u];
      TwoSums<A> t{A(0), A(0)};  // Σ gh, Σ gh·xhat
      for (int64_t j = threadIdx.x; j < gs; j += blockDim.x) {
        const A xh = (to_acc(x[off + j]) - mu) * rs;
        A gz = to_acc(g[off + j]);
        if (y && !(to_acc(y[off + j]) > A(0))) gz = A(0);
        const A gh = gamma ? gz * to_acc(gamma[p + j]) : gz;
        t.a += gh;
        t.b += gh * xh;
      }
      t = block_reduce(t, AddTwoSums{}, TwoSums<A>{A(0), A(0)});
      const A m_gh = t.a / A(gs), m_gh_xh = t.b / A(gs);
      for (int64_t j = threadIdx.x; j < gs; j += blockDim.x) {
        const A xh = (to_acc(x[off + j]) - mu) * rs;
        A gz = to_acc(g[off + j]);
        if (y && !(to_acc(y[off + j]) > A(0))) gz = A(0);
        const A gh = gamma ? gz * to_acc(gamma[p + j]) : gz;
        dx[off + j] = from_acc<T>(rs * (gh - m_gh - xh * m_gh_xh));
        pg[j] += gz * xh;
        pb[j] += gz;
      }
    }
  }
}

// Backward, pass 2: dgamma[j] = Σ_b partial[b, 0, j], dbeta[j] = Σ_b partial[b, 1, j]. Over
// partial as [nb, 2C]: block (32, 32) threads on columns k = 32·blockIdx.x + tx; thread
// (tx, ty) adds b = ty, ty + 32, ... in order, then thread (tx, 0) adds the 32 sums in ty order.
template <class T>
__global__ void __launch_bounds__(1024)
    normalize_param_grads(const acc_t<T>* partial, T* dgamma, T* dbeta, int64_t nblocks, int64_t c) {
  using A = acc_t<T>;
  __shared__ A sums[32][33];
  for (int64_t k0 = int64_t{blockIdx.x} * 32; k0 < 2 * c; k0 += int64_t{gridDim.x} * 32) {
    const int64_t k = k0 + threadIdx.x;
    A s = 0;
    if (k < 2 * c)
      for (int64_t b = threadIdx.y; b < nblocks; b += 32) s += partial[b * 2 * c + k];
    sums[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && k < 2 * c) {
      A t = 0;
      for (int w = 0; w < 32; ++w) t += sums[w][threadIdx.x];
      if (k < c)
        dgamma[k] = from_acc<T>(t);
      else
        dbeta[k - c] = from_acc<T>(t);
    }
    __syncthreads();
  }
}

/// dx, dgamma, dbeta of the group normalization (y: the forward output when it applied ReLU,
/// else null; gamma may be null). Row blocks of R rows: register paths R = max(16, ⌈rows·S /
/// 1024⌉) (about 1024 blocks), generic path at most 512 row blocks; the order of every sum
/// depends on the shape only.
template <class T>
void normalize_backward(const T* g, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd, const T* y,
                        const T* gamma, T* dx, T* dgamma, T* dbeta, int64_t rows, int64_t gs, int64_t nseg,
                        Device device, cudaStream_t stream, const char* op) {
  using namespace norm;
  using A = acc_t<T>;
  constexpr int V = kPack<T>;
  const int64_t c = gs * nseg, packs = (gs + V - 1) / V;
  const bool warp = packs <= 32 * kBwdIters<T>;
  const bool block = !warp && packs <= int64_t{kBwdMaxThreads} * kBwdIters<T>;
  const int64_t per_block = warp || block ? std::max<int64_t>(16, (rows * nseg + 1023) / 1024)
                                          : std::max<int64_t>(1, (rows + 511) / 512);
  const int64_t nblocks = (rows + per_block - 1) / per_block;  // every block has rows
  const DType acc_dtype = std::is_same_v<A, double> ? DType::f64 : DType::f32;
  Tensor partial = empty({nblocks > 0 ? nblocks * 2 * c : 1}, TensorOptions(acc_dtype).device(device));
  A* part = static_cast<A*>(partial.data_ptr());  // [nb, 2, C]
  if (nblocks > 0) {
    const bool vec = gs % V == 0 && aligned16(g) && aligned16(x) && aligned16(y) && aligned16(gamma) &&
                     aligned16(dx);
    const int n = static_cast<int>(std::min<int64_t>(gs, INT32_MAX));  // gs itself on the register paths
    const unsigned grid = grid_for_rows(nblocks * nseg);
    if (warp) {
      const size_t smem = size_t{kWarpsPerBlock} * 2 * packs * sizeof(AccPack<T>);  // [8, 2, packs] sums
      with_vec(vec, [&](auto kv) {
        with_iters<kBwdIters<T>>((packs + 31) / 32, [&](auto ki) {
          normalize_backward_kernel<T, decltype(ki)::value, true, decltype(kv)::value>
              <<<grid, 32 * kWarpsPerBlock, smem, stream>>>(g, x, mean, rstd, y, gamma, dx, part, rows, n, nseg,
                                                            per_block, nblocks);
        });
      });
    } else if (block) {
      with_vec(vec, [&](auto kv) {
        normalize_backward_kernel<T, kBwdIters<T>, false, decltype(kv)::value>
            <<<grid, team_threads(packs, kBwdIters<T>), 0, stream>>>(g, x, mean, rstd, y, gamma, dx, part, rows, n,
                                                                     nseg, per_block, nblocks);
      });
    } else {
      normalize_backward_generic_kernel<<<grid, threads_for(gs), 0, stream>>>(g, x, mean, rstd, y, gamma, dx, part,
                                                                              rows, gs, nseg, per_block, nblocks);
    }
    TS_CUDA_LAUNCH_CHECK(op);
  }
  normalize_param_grads<T><<<blocks_for(2 * c, 32), dim3(32, 32), 0, stream>>>(part, dgamma, dbeta, nblocks, c);
  TS_CUDA_LAUNCH_CHECK(op);
}

}  // namespace cuda
}  // namespace tessera
