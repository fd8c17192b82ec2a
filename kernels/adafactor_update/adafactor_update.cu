// adafactor_update on the GPU (full second moment; math in adafactor_update.h), over p [n]:
//   1. second_moment: pieces of kChunk elements, one block each (256 threads, grid-stride):
//        v' = β·v + (1 − β)·(g² + eps1),  u = g / sqrt(v')        (elements in acc_t)
//      and the piece's Σu² and Σp² in f64 (block tree, fixed order) -> partial [pieces]
//   2. adafactor_scalars (one block): step_size = α / max(1, RMS(u)/d), decay = α·wd
//   3. apply, one thread per element: v' again (the same expression, from the old v), stored
//      into v_out, and p' = p − decay·p − step_size·(g / sqrt(v'))
// u is always computed from v' in acc_t, never from v' rounded to T: for bf16/f16 a small v'
// would round to a much less precise subnormal or to 0 (g / sqrt(0) = inf), and the CPU
// (widened to f32) rounds v' only when storing it. v' is stored in step 3 only, so it may alias
// v (element i is read, then written, by one thread, after step 1 has read all of v); Σp² reads
// the old p in step 1, before step 3 writes p' (which may alias p).
#include "core/cuda/check.cuh"
#include "kernels/adafactor_update/adafactor_update.h"
#include "kernels/common/cuda/adafactor_step.cuh"
#include "kernels/common/cuda/device_math.cuh"
#include "kernels/common/cuda/dtype.cuh"

namespace tessera {

namespace {

constexpr int64_t kChunk = 8192;  // elements per piece of the sums

// v' = β·v + (1 − β)·(g² + eps1) in acc_t: one expression for steps 1 and 3, so both see the same v'.
template <class A>
__device__ __forceinline__ A new_second_moment(A g, A v, A beta, A one_minus_beta, A eps1) {
  return beta * v + one_minus_beta * (g * g + eps1);
}

template <class T>
__global__ void second_moment(const T* p, const T* g, const T* v, const double* step_t, cuda::TwoSums<double>* partial,
                              int64_t n, int64_t pieces, double decay_rate, double eps1, bool want_p2) {
  using A = cuda::acc_t<T>;
  const double beta_d = cuda::adafactor_beta2(*step_t, decay_rate);
  const A beta = static_cast<A>(beta_d), one_minus_beta = static_cast<A>(1.0 - beta_d), e1 = static_cast<A>(eps1);
  for (int64_t b = blockIdx.x; b < pieces; b += gridDim.x) {
    cuda::TwoSums<double> s{0.0, 0.0};  // Σu², Σp²
    const int64_t end = ::min(n, (b + 1) * kChunk);
    for (int64_t i = b * kChunk + threadIdx.x; i < end; i += blockDim.x) {
      const A gi = cuda::to_acc(g[i]);
      const A vi = new_second_moment(gi, cuda::to_acc(v[i]), beta, one_minus_beta, e1);
      const double u = static_cast<double>(gi / cuda::dev_sqrt(vi));
      s.a += u * u;
      if (want_p2) {
        const double pi = static_cast<double>(cuda::to_acc(p[i]));
        s.b += pi * pi;
      }
    }
    s = cuda::block_reduce(s, cuda::AddTwoSums{}, cuda::TwoSums<double>{0.0, 0.0});
    if (threadIdx.x == 0) partial[b] = s;
  }
}

template <class T>
__global__ void apply_update(const T* p, const T* g, const T* v, const double* step_t, const double* scalars, T* p_out,
                             T* v_out, int64_t n, double decay_rate, double eps1) {
  using A = cuda::acc_t<T>;
  const double beta_d = cuda::adafactor_beta2(*step_t, decay_rate);
  const A beta = static_cast<A>(beta_d), one_minus_beta = static_cast<A>(1.0 - beta_d), e1 = static_cast<A>(eps1);
  const A step_size = static_cast<A>(scalars[0]), decay = static_cast<A>(scalars[1]);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const A gi = cuda::to_acc(g[i]);
    const A vi = new_second_moment(gi, cuda::to_acc(v[i]), beta, one_minus_beta, e1);
    const A pi = cuda::to_acc(p[i]);
    v_out[i] = cuda::from_acc<T>(vi);
    p_out[i] = cuda::from_acc<T>(pi - decay * pi - step_size * (gi / cuda::dev_sqrt(vi)));
  }
}

}  // namespace

void op::AdafactorUpdate::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  const int64_t n = out[0].numel();
  if (n == 0) return;
  const int64_t pieces = (n + kChunk - 1) / kChunk;
  const Device dev = out[0].device();
  const cudaStream_t stream = cuda::current_stream(out[0]);
  // partial [pieces] of (Σu², Σp²) as f64 pairs, then the two scalars (f64).
  Tensor partial = empty({2 * pieces}, TensorOptions(DType::f64).device(dev));
  Tensor scalars = empty({2}, TensorOptions(DType::f64).device(dev));
  auto* part = static_cast<cuda::TwoSums<double>*>(partial.data_ptr());
  double* sc = static_cast<double*>(scalars.data_ptr());
  const double* lr = static_cast<const double*>(in[3].data_ptr());
  const double* step = static_cast<const double*>(in[4].data_ptr());
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(in[0].data_ptr());
    const T* g = static_cast<const T*>(in[1].data_ptr());
    const T* v = static_cast<const T*>(in[2].data_ptr());
    second_moment<<<cuda::grid_for_rows(pieces), 256, 0, stream>>>(p, g, v, step, part, n, pieces, a.decay_rate,
                                                                  a.eps1, a.scale_parameter);
    TS_CUDA_LAUNCH_CHECK(kName);
    cuda::adafactor_scalars<<<1, cuda::threads_for(pieces, 1024), 0, stream>>>(part, pieces, n, lr, step, a, sc);
    TS_CUDA_LAUNCH_CHECK(kName);
    apply_update<<<cuda::blocks_for(n), 256, 0, stream>>>(p, g, v, step, sc, static_cast<T*>(out[0].data_ptr()),
                                                          static_cast<T*>(out[1].data_ptr()), n, a.decay_rate, a.eps1);
    TS_CUDA_LAUNCH_CHECK(kName);
  });
}

}  // namespace tessera
