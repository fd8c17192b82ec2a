// Forward of the group normalization on the GPU (see normalize.cuh for the mapping). y's element
// type TY is x's T, or bf16/f16 for f32 x (layer_norm with a narrowed output): the same f32
// value rounded once to TY, stored in packs of kPack<T> elements (8 bytes for bf16/f16).
#pragma once

#include "kernels/common/cuda/normalize_common.cuh"

namespace tessera {
namespace cuda {

// Forward of unit u: G elements of x from (u / S)·ld + (u % S)·G (rows ld elements apart; ld =
// S·G for contiguous rows), parameters gamma, beta [(u % S)·G, ...); y at the same offsets.
// Shifted two-pass statistics (k = x_0 keeps a large common offset harmless, as on the CPU):
//   d = x − k,  m = mean(d),  var = mean((d − m)²),  rstd = 1/sqrt(var + eps) (in f64, then acc_t)
//   mean = k + m,  y = (d − m)·rstd·gamma + beta,  y = max(y, 0) with relu
// Team t of the grid takes units t, t + teams, ...; its threads keep their packs of x in
// registers through the mean, variance and output passes. Team sums: thread's own elements in
// (pack, element) order, then the fixed warp/block tree.
template <class T, class TY, int kIters, bool kWarp, bool kVec>
__global__ void __launch_bounds__(kWarp ? 32 * norm::kWarpsPerBlock : norm::kFwdMaxThreads)
    normalize_forward_kernel(const T* x, const T* gamma, const T* beta, TY* y, acc_t<T>* mean, acc_t<T>* rstd,
                             int64_t units, int gs, int64_t nseg, int64_t ld, double eps, bool relu) {
  using A = acc_t<T>;
  using Team = norm::Team<kWarp>;
  constexpr int V = norm::kPack<T>;
  const int rank = Team::rank(), size = Team::size();
  const int64_t teams = int64_t{gridDim.x} * Team::count();
  for (int64_t u = int64_t{blockIdx.x} * Team::count() + Team::index(); u < units; u += teams) {
    const int64_t off = (u / nseg) * ld + (u % nseg) * gs;
    const T* xs = x + off;
    norm::Pack<T> xv[kIters];  // packs rank + i·size of x
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int q = rank + i * size;
      xv[i] = q * V < gs ? norm::load_pack<kVec, V>(xs, q, gs) : norm::Pack<T>{};
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
      norm::Pack<T> gm{}, bt{};
      Pack<TY, V> out;
      if (gamma) gm = norm::load_pack<kVec, V>(gamma + p, q, gs);
      if (beta) bt = norm::load_pack<kVec, V>(beta + p, q, gs);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        A v = ((to_acc(xv[i].v[e]) - k) - m) * rs;
        if (gamma) v *= to_acc(gm.v[e]);
        if (beta) v += to_acc(bt.v[e]);
        if (relu) v = v > A(0) ? v : A(0);
        out.v[e] = from_acc<TY>(v);
      }
      norm::store_pack<kVec>(y + off, q, gs, out);
    }
  }
}

// Forward for units too long for registers: one block per unit, threads_for(G) threads, thread
// t on j = t, t + blockDim, ...; the same math, reading x once per pass.
template <class T, class TY>
__global__ void normalize_forward_generic_kernel(const T* x, const T* gamma, const T* beta, TY* y, acc_t<T>* mean,
                                                 acc_t<T>* rstd, int64_t units, int64_t gs, int64_t nseg,
                                                 int64_t ld, double eps, bool relu) {
  using A = acc_t<T>;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t off = (u / nseg) * ld + (u % nseg) * gs;
    const T* xs = x + off;
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
      y[off + j] = from_acc<TY>(v);
    }
  }
}

// ld: the row stride of x and y in elements (0: S·G, contiguous rows; larger: each row's S·G
// elements are a column range of wider rows, as qk_layer_norm's q and k).
template <class T, class TY = T>
void normalize_forward(const T* x, const T* gamma, const T* beta, TY* y, acc_t<T>* mean, acc_t<T>* rstd,
                       int64_t units, int64_t gs, int64_t nseg, double eps, bool relu, cudaStream_t stream,
                       const char* op, int64_t ld = 0) {
  using namespace norm;
  if (units == 0) return;
  if (ld == 0) ld = gs * nseg;
  constexpr int V = kPack<T>;
  const int64_t packs = (gs + V - 1) / V;
  const bool vec = gs % V == 0 && ld % V == 0 && aligned16(x) && aligned16(gamma) && aligned16(beta) &&
                   pack_aligned<V>(y);                               // y: 16 or 8 bytes
  const int n = static_cast<int>(std::min<int64_t>(gs, INT32_MAX));  // gs itself on the register paths
  if (packs <= 32 * kFwdWarpIters) {
    with_vec(vec, [&](auto kv) {
      with_iters<kFwdWarpIters>((packs + 31) / 32, [&](auto ki) {
        normalize_forward_kernel<T, TY, decltype(ki)::value, true, decltype(kv)::value>
            <<<blocks_for(units, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream>>>(x, gamma, beta, y, mean, rstd,
                                                                                   units, n, nseg, ld, eps, relu);
      });
    });
  } else if (packs <= int64_t{kFwdMaxThreads} * kFwdBlockIters) {
    with_vec(vec, [&](auto kv) {
      normalize_forward_kernel<T, TY, kFwdBlockIters, false, decltype(kv)::value>
          <<<grid_for_rows(units), team_threads(packs, kFwdBlockIters), 0, stream>>>(x, gamma, beta, y, mean, rstd,
                                                                                    units, n, nseg, ld, eps, relu);
    });
  } else {
    normalize_forward_generic_kernel<<<grid_for_rows(units), threads_for(gs), 0, stream>>>(
        x, gamma, beta, y, mean, rstd, units, gs, nseg, ld, eps, relu);
  }
  TS_CUDA_LAUNCH_CHECK(op);
}

}  // namespace cuda
}  // namespace tessera
