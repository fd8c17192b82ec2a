// adafactor_factored_update on the GPU (math in adafactor_factored_update.h), for p, g
// [B, n, m] taken as B matrices and s [B, n + m] = [row | col], q = g² + eps1:
//   1. row_averages: one block per row (b, i), threads_for(m) threads:
//        row'[b, i] = β·row + (1 − β)·mean_j q        (mean summed in f64, fixed order)
//   2. col_averages: one thread per column (b, j), walking i in order:
//        col'[b, j] = β·col + (1 − β)·mean_i q
//      Both store s' = [row' | col'] rounded to T and, for bf16/f16, also unrounded (f32)
//      into s_wide [B, n + m]. Steps 3, 4 and 6 read the unrounded s' (s_wide for bf16/f16,
//      s_out itself for f32/f64), as the CPU (widened to f32) does: rounded to f16, a small
//      average (g² of a small g) would become an imprecise subnormal or 0, making u, RMS(u)
//      and with it the whole step wrong.
//   3. row_means: one block per matrix: mean_row[b] = mean_i row'[b, i] (f64 sum, in acc_t)
//   4. u_sums: one block per row: u = g·rf·cf with rf = 1/sqrt(row'/mean_row), cf = 1/sqrt(col'),
//      the row's Σu² and Σp² (old p) in f64 -> partial [B·n]
//   5. adafactor_scalars (one block): step_size = α / max(1, RMS(u)/d), decay = α·wd
//   6. apply, one thread per element: p' = p − decay·p − step_size·u
// s' may alias s (each state element is read, then written, by one thread); p' may alias p
// (p is last read in step 4, before step 6 writes).
#include <type_traits>

#include "core/cuda/check.cuh"
#include "kernels/adafactor_factored_update/adafactor_factored_update.h"
#include "kernels/common/cuda/adafactor_step.cuh"
#include "kernels/common/cuda/device_math.cuh"
#include "kernels/common/cuda/dtype.cuh"

namespace tessera {

namespace {

using cuda::acc_t;
using cuda::from_acc;
using cuda::to_acc;

struct Beta {
  double beta, one_minus_beta;
};

__device__ __forceinline__ Beta beta_at(const double* step_t, double decay_rate) {
  const double b = cuda::adafactor_beta2(*step_t, decay_rate);
  return {b, 1.0 - b};
}

// s[b·(n + m) + i] for the row averages, s[b·(n + m) + n + j] for the column averages.
// s_wide: null, or [B, n + m] in acc_t (f32) where the unrounded s' is stored as well.
template <class T>
__global__ void row_averages(const T* g, const T* s, T* s_out, acc_t<T>* s_wide, const double* step_t, int64_t rows,
                             int64_t n, int64_t m, double decay_rate, double eps1) {
  using A = acc_t<T>;
  const Beta bt = beta_at(step_t, decay_rate);
  const A beta = static_cast<A>(bt.beta), one_minus_beta = static_cast<A>(bt.one_minus_beta), e1 = static_cast<A>(eps1);
  for (int64_t ri = blockIdx.x; ri < rows; ri += gridDim.x) {
    const T* gr = g + ri * m;
    double acc = 0;
    for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
      const A gj = to_acc(gr[j]);
      acc += static_cast<double>(gj * gj + e1);
    }
    acc = cuda::block_sum(acc);
    if (threadIdx.x == 0) {
      const int64_t k = (ri / n) * (n + m) + ri % n;
      const A row = beta * to_acc(s[k]) + one_minus_beta * static_cast<A>(acc / static_cast<double>(m));
      s_out[k] = from_acc<T>(row);
      if (s_wide) s_wide[k] = row;
    }
  }
}

template <class T>
__global__ void col_averages(const T* g, const T* s, T* s_out, acc_t<T>* s_wide, const double* step_t, int64_t batches,
                             int64_t n, int64_t m, double decay_rate, double eps1) {
  using A = acc_t<T>;
  const Beta bt = beta_at(step_t, decay_rate);
  const A beta = static_cast<A>(bt.beta), one_minus_beta = static_cast<A>(bt.one_minus_beta), e1 = static_cast<A>(eps1);
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < batches * m; t += stride) {
    const int64_t b = t / m, j = t % m;
    const T* gc = g + b * n * m + j;
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      const A gi = to_acc(gc[i * m]);
      acc += static_cast<double>(gi * gi + e1);
    }
    const int64_t k = b * (n + m) + n + j;
    const A col = beta * to_acc(s[k]) + one_minus_beta * static_cast<A>(acc / static_cast<double>(n));
    s_out[k] = from_acc<T>(col);
    if (s_wide) s_wide[k] = col;
  }
}

// s_new: the unrounded new state s' [B, n + m] in acc_t (see the top of the file).
template <class A>
__global__ void row_means(const A* s_new, A* mean_row, int64_t batches, int64_t n, int64_t m) {
  for (int64_t b = blockIdx.x; b < batches; b += gridDim.x) {
    const A* row = s_new + b * (n + m);
    double acc = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += static_cast<double>(row[i]);
    acc = cuda::block_sum(acc);
    if (threadIdx.x == 0) mean_row[b] = static_cast<A>(acc / static_cast<double>(n));
  }
}

// u[b, i, j] = g·rf[b, i]·cf[b, j] in acc_t (no product of two tiny averages, as on the CPU).
template <class T>
__device__ __forceinline__ acc_t<T> factored_u(const T* g, const acc_t<T>* s_new, const acc_t<T>* mean_row, int64_t ri,
                                               int64_t j, int64_t n, int64_t m) {
  using A = acc_t<T>;
  const int64_t b = ri / n;
  const A rf = A(1) / cuda::dev_sqrt(s_new[b * (n + m) + ri % n] / mean_row[b]);
  const A cf = A(1) / cuda::dev_sqrt(s_new[b * (n + m) + n + j]);
  return to_acc(g[ri * m + j]) * rf * cf;
}

template <class T>
__global__ void u_sums(const T* p, const T* g, const acc_t<T>* s_new, const acc_t<T>* mean_row,
                       cuda::TwoSums<double>* partial, int64_t rows, int64_t n, int64_t m, bool want_p2) {
  for (int64_t ri = blockIdx.x; ri < rows; ri += gridDim.x) {
    cuda::TwoSums<double> s{0.0, 0.0};  // Σu², Σp² of the row
    for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
      const double u = static_cast<double>(factored_u(g, s_new, mean_row, ri, j, n, m));
      s.a += u * u;
      if (want_p2) {
        const double pk = static_cast<double>(to_acc(p[ri * m + j]));
        s.b += pk * pk;
      }
    }
    s = cuda::block_reduce(s, cuda::AddTwoSums{}, cuda::TwoSums<double>{0.0, 0.0});
    if (threadIdx.x == 0) partial[ri] = s;
  }
}

template <class T>
__global__ void apply_update(const T* p, const T* g, const acc_t<T>* s_new, const acc_t<T>* mean_row,
                             const double* scalars, T* p_out, int64_t numel, int64_t n, int64_t m) {
  using A = acc_t<T>;
  const A step_size = static_cast<A>(scalars[0]), decay = static_cast<A>(scalars[1]);
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < numel; k += int64_t{gridDim.x} * blockDim.x) {
    const A pk = to_acc(p[k]);
    p_out[k] = from_acc<T>(pk - decay * pk - step_size * factored_u(g, s_new, mean_row, k / m, k % m, n, m));
  }
}

}  // namespace

void op::AdafactorFactoredUpdate::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  const Shape& shape = out[0].shape();
  const int64_t n = shape[-2], m = shape[-1], numel = out[0].numel();
  const Device dev = out[0].device();
  const cudaStream_t stream = cuda::current_stream(out[0]);
  if (numel == 0) {  // nothing to average: the state stays as it is
    if (out[1].data_ptr() != in[2].data_ptr() && out[1].nbytes() > 0)
      TS_CUDA_CHECK(
          cudaMemcpyAsync(out[1].data_ptr(), in[2].data_ptr(), out[1].nbytes(), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const int64_t batches = out[1].numel() / (n + m), rows = batches * n;
  const double* lr = static_cast<const double*>(in[3].data_ptr());
  const double* step = static_cast<const double*>(in[4].data_ptr());
  // partial [rows] of (Σu², Σp²) as f64 pairs, the two scalars (f64), mean_row [B] (acc_t).
  Tensor partial = empty({2 * rows}, TensorOptions(DType::f64).device(dev));
  Tensor scalars = empty({2}, TensorOptions(DType::f64).device(dev));
  auto* part = static_cast<cuda::TwoSums<double>*>(partial.data_ptr());
  double* sc = static_cast<double*>(scalars.data_ptr());
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const DType acc_dtype = std::is_same_v<A, double> ? DType::f64 : DType::f32;
    Tensor means = empty({batches}, TensorOptions(acc_dtype).device(dev));
    A* mean_row = static_cast<A*>(means.data_ptr());
    const T* p = static_cast<const T*>(in[0].data_ptr());
    const T* g = static_cast<const T*>(in[1].data_ptr());
    const T* s = static_cast<const T*>(in[2].data_ptr());
    T* s_out = static_cast<T*>(out[1].data_ptr());
    // The unrounded s' that steps 3, 4 and 6 read: s_out itself when T is its own acc_t (f32,
    // f64); for bf16/f16 the f32 copy s_wide [B, n + m] (pool memory) that steps 1 and 2 fill.
    Tensor wide;
    A* s_wide = nullptr;
    const A* s_new = nullptr;
    if constexpr (std::is_same_v<T, A>) {
      s_new = s_out;
    } else {
      wide = empty({out[1].numel()}, TensorOptions(DType::f32).device(dev));
      s_wide = static_cast<A*>(wide.data_ptr());
      s_new = s_wide;
    }
    row_averages<<<cuda::grid_for_rows(rows), cuda::threads_for(m), 0, stream>>>(g, s, s_out, s_wide, step, rows, n, m,
                                                                                 a.decay_rate, a.eps1);
    TS_CUDA_LAUNCH_CHECK(kName);
    col_averages<<<cuda::blocks_for(batches * m), 256, 0, stream>>>(g, s, s_out, s_wide, step, batches, n, m,
                                                                     a.decay_rate, a.eps1);
    TS_CUDA_LAUNCH_CHECK(kName);
    row_means<<<cuda::grid_for_rows(batches), cuda::threads_for(n), 0, stream>>>(s_new, mean_row, batches, n, m);
    TS_CUDA_LAUNCH_CHECK(kName);
    u_sums<<<cuda::grid_for_rows(rows), cuda::threads_for(m), 0, stream>>>(p, g, s_new, static_cast<const A*>(mean_row),
                                                                           part, rows, n, m, a.scale_parameter);
    TS_CUDA_LAUNCH_CHECK(kName);
    cuda::adafactor_scalars<<<1, cuda::threads_for(rows, 1024), 0, stream>>>(part, rows, numel, lr, step, a, sc);
    TS_CUDA_LAUNCH_CHECK(kName);
    apply_update<<<cuda::blocks_for(numel), 256, 0, stream>>>(p, g, s_new, static_cast<const A*>(mean_row), sc,
                                                              static_cast<T*>(out[0].data_ptr()), numel, n, m);
    TS_CUDA_LAUNCH_CHECK(kName);
  });
}

}  // namespace tessera
