// causal_softmax on the GPU, x [rows, S] (row r = query t = r mod T, visible keys s < n,
// n = t + S − T + 1; see kernels/common/cuda/causal_rows.cuh for the launch plan), in acc_t:
//   v_s = scale · x_s,  m = max_{s<n} v_s,  e_s = exp(v_s − m),  y_s = e_s / Σ_{s<n} e_s,
//   y_s = 0 for s >= n (masked keys are never read). One rounding on store.
#include "core/cuda/check.cuh"
#include "kernels/causal_softmax/causal_softmax.h"
#include "kernels/common/cuda/causal_rows.cuh"
#include "kernels/common/cuda/softmax_row.cuh"

namespace tessera {

namespace {

// One warp per row; lane l holds v for keys s = l + 32i (i < K) in registers: read once,
// max and sum by warp shuffles, written once (zeros above n).
template <class T, int K>
__global__ void causal_softmax_warp(const T* x, T* y, int64_t rows, int64_t T_, int64_t S, cuda::acc_t<T> scale) {
  using A = cuda::acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t step = static_cast<int64_t>(gridDim.x) * cuda::kCausalWarpsPerBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * cuda::kCausalWarpsPerBlock + (threadIdx.x >> 5); r < rows;
       r += step) {  // r is the same for the whole warp: its shuffles see all 32 lanes
    const int64_t n = cuda::causal_visible(r, T_, S);
    const T* xr = x + r * S;
    A v[K];
    A m = A(-INFINITY);
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int64_t s = lane + 32 * i;
      v[i] = s < n ? scale * cuda::to_acc(xr[s]) : A(-INFINITY);
      m = v[i] > m ? v[i] : m;
    }
    m = cuda::warp_reduce(m, cuda::MaxOp{});
    A sum = 0;
#pragma unroll
    for (int i = 0; i < K; ++i) {
      v[i] = lane + 32 * i < n ? cuda::dev_exp(v[i] - m) : A(0);
      sum += v[i];
    }
    const A inv = A(1) / cuda::warp_reduce(sum, cuda::SumOp{});
    T* yr = y + r * S;
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int64_t s = lane + 32 * i;
      if (s < S) yr[s] = cuda::from_acc<T>(v[i] * inv);
    }
  }
}

// One block per row (long rows). Pass 1: each thread keeps an online (max, Σ exp) of its keys
// s = tid, tid + blockDim, ... < n (caching v_s in shared memory when kCached), combined over
// the block; pass 2 writes y_s = exp(v_s − m) / Σ for the same keys (v_s from the cache or
// read again) and zeros above n. A thread only reads back its own cache slots: no barrier.
template <class T, bool kCached>
__global__ void causal_softmax_block(const T* x, T* y, int64_t rows, int64_t T_, int64_t S, cuda::acc_t<T> scale) {
  using A = cuda::acc_t<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  A* cache = reinterpret_cast<A*>(smem);  // [S] when kCached
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t n = cuda::causal_visible(r, T_, S);
    const T* xr = x + r * S;
    cuda::MaxSumExp<A> st{A(-INFINITY), A(0)};
    for (int64_t s = threadIdx.x; s < n; s += blockDim.x) {
      const A v = scale * cuda::to_acc(xr[s]);
      if constexpr (kCached) cache[s] = v;
      if (v > st.m) {
        st.s = st.s * cuda::rescale(st.m, v) + A(1);
        st.m = v;
      } else {
        st.s += cuda::rescale(v, st.m);
      }
    }
    st = cuda::block_reduce(st, cuda::CombineMaxSumExp{}, cuda::MaxSumExp<A>{A(-INFINITY), A(0)});
    const A inv = A(1) / st.s;
    T* yr = y + r * S;
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
      A p = 0;
      if (s < n) {
        A v;
        if constexpr (kCached) {
          v = cache[s];
        } else {
          v = scale * cuda::to_acc(xr[s]);
        }
        p = cuda::dev_exp(v - st.m) * inv;
      }
      yr[s] = cuda::from_acc<T>(p);
    }
  }
}

}  // namespace

void op::CausalSoftmax::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  if (in[0].numel() == 0) return;
  const int64_t T_ = in[0].shape()[-2], S = in[0].shape()[-1], rows = in[0].numel() / S;
  cudaStream_t stream = cuda::current_stream(out[0]);
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = cuda::acc_t<T>;
    const T* x = static_cast<const T*>(in[0].data_ptr());
    T* y = static_cast<T*>(out[0].data_ptr());
    const A scale = static_cast<A>(attrs.scale);
    if (S <= cuda::kCausalWarpMaxS) {
      cuda::dispatch_per_lane(S, [&](auto k) {
        causal_softmax_warp<T, decltype(k)::value>
            <<<cuda::causal_warp_grid(rows), 32 * cuda::kCausalWarpsPerBlock, 0, stream>>>(x, y, rows, T_, S, scale);
      });
    } else {
      const unsigned grid = cuda::grid_for_rows(rows);
      const int threads = cuda::threads_for(S, cuda::kCausalBlockThreads);
      if (cuda::cached_fits(S, sizeof(A))) {
        causal_softmax_block<T, true><<<grid, threads, S * sizeof(A), stream>>>(x, y, rows, T_, S, scale);
      } else {
        causal_softmax_block<T, false><<<grid, threads, 0, stream>>>(x, y, rows, T_, S, scale);
      }
    }
  });
  TS_CUDA_LAUNCH_CHECK(kName);
}

}  // namespace tessera
