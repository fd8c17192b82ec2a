// Backward of the group normalization on the GPU (see normalize.cuh for the mapping). The
// gradient g and the forward output y (with ReLU) have the element type TG: x's T, or bf16/f16
// for f32 x (layer_norm with a narrowed output), widened exactly on load and read in packs of
// kPack<T> elements (8 bytes for bf16/f16), so every result has the bits of the f32 g's.
#pragma once

#include "kernels/common/cuda/normalize_common.cuh"

namespace tessera {
namespace cuda {

// Backward, pass 1. Block (b, s) takes rows [b·R, min((b+1)·R, rows)) of segment s; team w of
// the block takes rows b·R + w, + teams, ... (warp teams: 8 per block; a block team: 1). With
// xhat = (x − mean)·rstd, gz = relu ? g·[y > 0] : g and gh = gz·gamma (gz without gamma), per row:
//   dx = rstd · (gh − mean_G(gh) − xhat · mean_G(gh · xhat))
// A thread keeps its packs of gz and x in registers (read once) and adds, row after row, gz·xhat
// and gz into the sums of its columns: in registers for a block team, in its warp's slice of
// shared memory ([teams, 2, ⌈G/kPack⌉·kPack] of acc_t) for warp teams, whose slices are then
// added in warp order. Out: partial[b, 0, sG + j] = Σ gz·xhat, partial[b, 1, sG + j] = Σ gz.
template <class T, class TG, int kIters, bool kWarp, bool kVec>
__global__ void __launch_bounds__(kWarp ? 32 * norm::kWarpsPerBlock : norm::kBwdMaxThreads)
    normalize_backward_kernel(const TG* g, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd, const TG* y,
                              const T* gamma, T* dx, acc_t<T>* partial, int64_t rows, int gs, int64_t nseg,
                              int64_t ld, int64_t per_block, int64_t nblocks) {
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
      const int64_t u = r * nseg + s, off = r * ld + p;
      Pack<TG, V> gv[kIters];  // gz
      norm::Pack<T> xv[kIters];
#pragma unroll
      for (int i = 0; i < kIters; ++i) {
        const int q = rank + i * size;
        gv[i] = Pack<TG, V>{};
        xv[i] = norm::Pack<T>{};
        if (q >= gp) continue;
        gv[i] = norm::load_pack<kVec, V>(g + off, q, gs);
        xv[i] = norm::load_pack<kVec, V>(x + off, q, gs);
        if (y) {  // ReLU first: the gradient reaches z only where y = max(z, 0) > 0
          const Pack<TG, V> yv = norm::load_pack<kVec, V>(y + off, q, gs);
#pragma unroll
          for (int e = 0; e < V; ++e)
            if (!(to_acc(yv.v[e]) > A(0))) gv[i].v[e] = norm::zero_of<TG>();
        }
      }
      const A mu = mean[u], rs = rstd[u];
      TwoSums<A> t{A(0), A(0)};  // Σ gh, Σ gh·xhat
#pragma unroll
      for (int i = 0; i < kIters; ++i) {
        const int q = rank + i * size;
        if (q >= gp) continue;
        norm::Pack<T> gm{};
        if (gamma) gm = norm::load_pack<kVec, V>(gamma + p, q, gs);
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
        if (gamma) gm = norm::load_pack<kVec, V>(gamma + p, q, gs);
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
template <class T, class TG>
__global__ void normalize_backward_generic_kernel(const TG* g, const T* x, const acc_t<T>* mean,
                                                  const acc_t<T>* rstd, const TG* y, const T* gamma, T* dx,
                                                  acc_t<T>* partial, int64_t rows, int64_t gs, int64_t nseg,
                                                  int64_t ld, int64_t per_block, int64_t nblocks) {
  using A = acc_t<T>;
  const int64_t c = gs * nseg;
  for (int64_t bid = blockIdx.x; bid < nblocks * nseg; bid += gridDim.x) {
    const int64_t b = bid / nseg, s = bid % nseg, p = s * gs;
    A* pg = partial + b * 2 * c + p;  // [G] of dgamma
    A* pb = pg + c;                   // [G] of dbeta
    for (int64_t j = threadIdx.x; j < gs; j += blockDim.x) pg[j] = pb[j] = A(0);
    const int64_t r1 = ::min(rows, (b + 1) * per_block);
    for (int64_t r = b * per_block; r < r1; ++r) {
      const int64_t u = r * nseg + s, off = r * ld + p;
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
/// depends on the shape only. ld: the row stride of g, x, y and dx in elements (0: S·G).
template <class T, class TG = T>
void normalize_backward(const TG* g, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd, const TG* y,
                        const T* gamma, T* dx, T* dgamma, T* dbeta, int64_t rows, int64_t gs, int64_t nseg,
                        Device device, cudaStream_t stream, const char* op, int64_t ld = 0) {
  using namespace norm;
  using A = acc_t<T>;
  constexpr int V = kPack<T>;
  if (ld == 0) ld = gs * nseg;
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
    const bool vec = gs % V == 0 && ld % V == 0 && pack_aligned<V>(g) && aligned16(x) && pack_aligned<V>(y) &&
                     aligned16(gamma) && aligned16(dx);  // g, y: 16 or 8 bytes
    const int n = static_cast<int>(std::min<int64_t>(gs, INT32_MAX));  // gs itself on the register paths
    const unsigned grid = grid_for_rows(nblocks * nseg);
    if (warp) {
      const size_t smem = size_t{kWarpsPerBlock} * 2 * packs * sizeof(AccPack<T>);  // [8, 2, packs] sums
      with_vec(vec, [&](auto kv) {
        with_iters<kBwdIters<T>>((packs + 31) / 32, [&](auto ki) {
          normalize_backward_kernel<T, TG, decltype(ki)::value, true, decltype(kv)::value>
              <<<grid, 32 * kWarpsPerBlock, smem, stream>>>(g, x, mean, rstd, y, gamma, dx, part, rows, n, nseg,
                                                            ld, per_block, nblocks);
        });
      });
    } else if (block) {
      with_vec(vec, [&](auto kv) {
        normalize_backward_kernel<T, TG, kBwdIters<T>, false, decltype(kv)::value>
            <<<grid, team_threads(packs, kBwdIters<T>), 0, stream>>>(g, x, mean, rstd, y, gamma, dx, part, rows, n,
                                                                     nseg, ld, per_block, nblocks);
      });
    } else {
      normalize_backward_generic_kernel<<<grid, threads_for(gs), 0, stream>>>(g, x, mean, rstd, y, gamma, dx, part,
                                                                              rows, gs, nseg, ld, per_block, nblocks);
    }
    TS_CUDA_LAUNCH_CHECK(op);
  }
  normalize_param_grads<T><<<blocks_for(2 * c, 32), dim3(32, 32), 0, stream>>>(part, dgamma, dbeta, nblocks, c);
  TS_CUDA_LAUNCH_CHECK(op);
}

}  // namespace cuda
}  // namespace tessera
