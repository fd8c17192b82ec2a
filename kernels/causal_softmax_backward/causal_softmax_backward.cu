// causal_softmax_backward on the GPU, g, y [rows, S] (row r = query t = r mod T, visible keys
// s < n, n = t + S − T + 1; launch plan in kernels/common/cuda/causal_rows.cuh), in acc_t:
//   d = Σ_{s<n} g_s · y_s,   dx_s = scale · y_s · (g_s − d) for s < n,   dx_s = 0 for s >= n
// (masked keys are never read). One rounding on store.
#include "core/cuda/check.cuh"
#include "kernels/causal_softmax_backward/causal_softmax_backward.h"
#include "kernels/common/cuda/causal_rows.cuh"
#include "kernels/common/cuda/dtype.cuh"

namespace tessera {

namespace {

// One warp per row; lane l holds g_s, y_s for keys s = l + 32i (i < K) in registers.
template <class T, int K>
__global__ void causal_softmax_backward_warp(const T* g, const T* y, T* dx, int64_t rows, int64_t T_, int64_t S,
                                             cuda::acc_t<T> scale) {
  using A = cuda::acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t step = static_cast<int64_t>(gridDim.x) * cuda::kCausalWarpsPerBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * cuda::kCausalWarpsPerBlock + (threadIdx.x >> 5); r < rows;
       r += step) {  // r is the same for the whole warp: its shuffles see all 32 lanes
    const int64_t n = cuda::causal_visible(r, T_, S);
    const T* gr = g + r * S;
    const T* yr = y + r * S;
    A gv[K], yv[K];
    A d = 0;
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int64_t s = lane + 32 * i;
      gv[i] = s < n ? cuda::to_acc(gr[s]) : A(0);
      yv[i] = s < n ? cuda::to_acc(yr[s]) : A(0);
      d += gv[i] * yv[i];
    }
    d = cuda::warp_reduce(d, cuda::SumOp{});
    T* dr = dx + r * S;
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int64_t s = lane + 32 * i;
      if (s < S) dr[s] = cuda::from_acc<T>(s < n ? scale * yv[i] * (gv[i] - d) : A(0));
    }
  }
}

// One block per row (long rows): pass 1 sums g_s·y_s over the thread's keys s = tid,
// tid + blockDim, ... < n (caching g_s and y_s in shared memory when kCached), block sum; pass 2
// writes dx for the same keys and zeros above n. Threads read back only their own cache slots.
template <class T, bool kCached>
__global__ void causal_softmax_backward_block(const T* g, const T* y, T* dx, int64_t rows, int64_t T_, int64_t S,
                                              cuda::acc_t<T> scale) {
  using A = cuda::acc_t<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  A* gc = reinterpret_cast<A*>(smem);  // [S] when kCached
  A* yc = gc + S;                      // [S] when kCached
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t n = cuda::causal_visible(r, T_, S);
    const T* gr = g + r * S;
    const T* yr = y + r * S;
    A d = 0;
    for (int64_t s = threadIdx.x; s < n; s += blockDim.x) {
      const A gs = cuda::to_acc(gr[s]), ys = cuda::to_acc(yr[s]);
      if constexpr (kCached) {
        gc[s] = gs;
        yc[s] = ys;
      }
      d += gs * ys;
    }
    d = cuda::block_sum(d);
    T* dr = dx + r * S;
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
      A v = 0;
      if (s < n) {
        if constexpr (kCached) {
          v = scale * yc[s] * (gc[s] - d);
        } else {
          v = scale * cuda::to_acc(yr[s]) * (cuda::to_acc(gr[s]) - d);
        }
      }
      dr[s] = cuda::from_acc<T>(v);
    }
  }
}

}  // namespace

void op::CausalSoftmaxBackward::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  if (in[0].numel() == 0) return;
  const int64_t T_ = in[0].shape()[-2], S = in[0].shape()[-1], rows = in[0].numel() / S;
  cudaStream_t stream = cuda::current_stream(out[0]);
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = cuda::acc_t<T>;
    const T* g = static_cast<const T*>(in[0].data_ptr());
    const T* y = static_cast<const T*>(in[1].data_ptr());
    T* dx = static_cast<T*>(out[0].data_ptr());
    const A scale = static_cast<A>(attrs.scale);
    if (S <= cuda::kCausalWarpMaxS) {
      cuda::dispatch_per_lane(S, [&](auto k) {
        causal_softmax_backward_warp<T, decltype(k)::value>
            <<<cuda::causal_warp_grid(rows), 32 * cuda::kCausalWarpsPerBlock, 0, stream>>>(g, y, dx, rows, T_, S,
                                                                                           scale);
      });
    } else {
      const unsigned grid = cuda::grid_for_rows(rows);
      const int threads = cuda::threads_for(S, cuda::kCausalBlockThreads);
      if (cuda::cached_fits(2 * S, sizeof(A))) {
        causal_softmax_backward_block<T, true><<<grid, threads, 2 * S * sizeof(A), stream>>>(g, y, dx, rows, T_, S,
                                                                                             scale);
      } else {
        causal_softmax_backward_block<T, false><<<grid, threads, 0, stream>>>(g, y, dx, rows, T_, S, scale);
      }
    }
  });
  TS_CUDA_LAUNCH_CHECK(kName);
}

}  // namespace tessera
