// The group normalization of layer_norm (one group per row) and sparse_layer_norm (S groups of
// G = C / S features per row, optional fused ReLU), forward and backward, on the GPU. The math
// is that of kernels/common/normalize.h and the CPU backward kernels; statistics are in acc_t
// (f32; f64 for f64), which is also the dtype of the mean/rstd tensors.
//
//   cuda::normalize_forward<T>(x, gamma, beta, y, mean, rstd, units, G, S, eps, relu, stream);
//   cuda::normalize_backward<T>(g, x, mean, rstd, y_or_null, gamma, dx, dgamma, dbeta, rows, G, S, device, stream);
#pragma once

#include <cmath>
#include <cstdint>

#include "core/cuda/check.cuh"
#include "core/tensor.h"
#include "kernels/common/cuda/block_reduce.cuh"
#include "kernels/common/cuda/dtype.cuh"

namespace tessera {
namespace cuda {

// Forward. Unit u = (row u / S, segment u % S) owns x[u·G, (u+1)·G) and the parameters
// [(u % S)·G, ...). One block per unit, threads_for(G) threads, thread t on j = t, t + blockDim, ...
// Shifted two-pass statistics (k = x_0 keeps a large common offset harmless, as on the CPU):
//   d = x − k,  m = mean(d),  var = mean((d − m)²),  rstd = 1/sqrt(var + eps) (in f64, then acc_t)
//   mean = k + m,  y = (d − m)·rstd·gamma + beta,  y = max(y, 0) with relu
template <class T>
__global__ void normalize_forward_kernel(const T* x, const T* gamma, const T* beta, T* y, acc_t<T>* mean,
                                         acc_t<T>* rstd, int64_t units, int64_t gs, int64_t nseg, double eps,
                                         bool relu) {
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

template <class T>
void normalize_forward(const T* x, const T* gamma, const T* beta, T* y, acc_t<T>* mean, acc_t<T>* rstd,
                       int64_t units, int64_t gs, int64_t nseg, double eps, bool relu, cudaStream_t stream,
                       const char* op) {
  if (units == 0) return;
  normalize_forward_kernel<<<grid_for_rows(units), threads_for(gs), 0, stream>>>(x, gamma, beta, y, mean, rstd,
                                                                                units, gs, nseg, eps, relu);
  TS_CUDA_LAUNCH_CHECK(op);
}

// Backward, pass 1. Block (b, s) takes rows [b·R, (b+1)·R) (R = rows per block) of segment s,
// threads_for(G) threads, thread t on j = t, t + blockDim, ... With xhat = (x − mean)·rstd,
// gz = relu ? g·[y > 0] : g and gh = gz·gamma (gz without gamma), per row:
//   dx = rstd · (gh − mean_G(gh) − xhat · mean_G(gh · xhat))
// and the block's share of dgamma, dbeta: partial[b, 0, sG + j] = Σ_rows gz·xhat,
// partial[b, 1, sG + j] = Σ_rows gz (each column owned by one thread, rows added in order).
template <class T>
__global__ void normalize_backward_kernel(const T* g, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                                          const T* y, const T* gamma, T* dx, acc_t<T>* partial, int64_t rows,
                                          int64_t gs, int64_t nseg, int64_t per_block, int64_t nblocks) {
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

// Backward, pass 2: dgamma[j] = Σ_b partial[b, 0, j], dbeta[j] = Σ_b partial[b, 1, j], b in
// order; one thread per column j.
template <class T>
__global__ void normalize_param_grads(const acc_t<T>* partial, T* dgamma, T* dbeta, int64_t nblocks, int64_t c) {
  using A = acc_t<T>;
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < c; j += int64_t{gridDim.x} * blockDim.x) {
    A sg = 0, sb = 0;
    for (int64_t b = 0; b < nblocks; ++b) {
      sg += partial[b * 2 * c + j];
      sb += partial[b * 2 * c + c + j];
    }
    dgamma[j] = from_acc<T>(sg);
    dbeta[j] = from_acc<T>(sb);
  }
}

/// dx, dgamma, dbeta of the group normalization (y: the forward output when it applied ReLU,
/// else null; gamma may be null). Row blocks: at most 512, rows per block fixed by `rows`, so the
/// order of every sum depends on the shape only.
template <class T>
void normalize_backward(const T* g, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd, const T* y,
                        const T* gamma, T* dx, T* dgamma, T* dbeta, int64_t rows, int64_t gs, int64_t nseg,
                        Device device, cudaStream_t stream, const char* op) {
  using A = acc_t<T>;
  constexpr int64_t kMaxRowBlocks = 512;
  const int64_t c = gs * nseg;
  const int64_t per_block = rows > 0 ? (rows + kMaxRowBlocks - 1) / kMaxRowBlocks : 1;
  const int64_t nblocks = (rows + per_block - 1) / per_block;  // every block has rows
  const DType acc_dtype = std::is_same_v<A, double> ? DType::f64 : DType::f32;
  Tensor partial = empty({nblocks > 0 ? nblocks * 2 * c : 1}, TensorOptions(acc_dtype).device(device));  // [nb, 2, C]
  A* part = static_cast<A*>(partial.data_ptr());
  if (nblocks > 0) {
    normalize_backward_kernel<<<grid_for_rows(nblocks * nseg), threads_for(gs), 0, stream>>>(
        g, x, mean, rstd, y, gamma, dx, part, rows, gs, nseg, per_block, nblocks);
    TS_CUDA_LAUNCH_CHECK(op);
  }
  normalize_param_grads<<<blocks_for(c), 256, 0, stream>>>(static_cast<const A*>(part), dgamma, dbeta, nblocks, c);
  TS_CUDA_LAUNCH_CHECK(op);
}

}  // namespace cuda
}  // namespace tessera
