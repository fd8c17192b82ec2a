// cast on the GPU: y[i] = convert(x[i]) for every pair of dtypes, four elements per thread (one
// packed load and store when aligned). The
// rules are the CPU's convert_elements (core/convert.cpp): each value is loaded exactly as f64,
// then stored as
//   f64:      itself;            f32: rounded to nearest (even);
//   bf16/f16: rounded to f32 first, then to nearest even (so f64 -> bf16 rounds twice, as on the
//             CPU); overflow to ±inf, f16 subnormals kept;
//   i32/u8:   truncated toward zero and saturated at the type's range; NaN -> 0.
// Every non-NaN value converts to the same bits as on the CPU; NaN stays NaN (its payload bits
// may differ). The same dtype is a plain device copy.
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "kernels/cast/cast.h"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/vectorized.cuh"

namespace tessera {

namespace {

__device__ __forceinline__ double load(float v) { return v; }
__device__ __forceinline__ double load(double v) { return v; }
__device__ __forceinline__ double load(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ double load(__half v) { return __half2float(v); }
__device__ __forceinline__ double load(int32_t v) { return v; }
__device__ __forceinline__ double load(uint8_t v) { return v; }

template <class I>
__device__ __forceinline__ I store_int(double v) {
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<I>::max());
  return v != v    ? I(0)
         : v <= lo ? std::numeric_limits<I>::min()
         : v >= hi ? std::numeric_limits<I>::max()
                   : static_cast<I>(v);
}

template <class D>
__device__ __forceinline__ D store(double v) {
  if constexpr (std::is_same_v<D, double>) {
    return v;
  } else if constexpr (std::is_same_v<D, float>) {
    return __double2float_rn(v);
  } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    return __float2bfloat16_rn(__double2float_rn(v));
  } else if constexpr (std::is_same_v<D, __half>) {
    return __float2half_rn(__double2float_rn(v));
  } else {
    return store_int<D>(v);
  }
}

// Between f32, bf16 and f16 the route through f64 is exact on the way in and rounds the same
// way on the way out as f32 math does (an f32 value converts to f64 and back unchanged), so
// these pairs convert in f32 directly.
template <class T>
constexpr bool kF32Exact = std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;

template <class S, class D>
__device__ __forceinline__ D convert(S v) {
  if constexpr (kF32Exact<S> && kF32Exact<D>) {
    return cuda::from_acc<D>(cuda::to_acc(v));
  } else {
    return store<D>(load(v));
  }
}

// Flat loop, N elements per thread per step (packed loads and stores when N > 1).
template <int N, class S, class D>
__global__ void cast_kernel(const S* x, D* y, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t packs = N > 1 ? n / N : 0;
  for (int64_t v = first; v < packs; v += stride) {
    const cuda::Pack<S, N> a = reinterpret_cast<const cuda::Pack<S, N>*>(x)[v];
    cuda::Pack<D, N> r;
#pragma unroll
    for (int k = 0; k < N; ++k) r.v[k] = convert<S, D>(a.v[k]);
    reinterpret_cast<cuda::Pack<D, N>*>(y)[v] = r;
  }
  for (int64_t i = packs * N + first; i < n; i += stride) y[i] = convert<S, D>(x[i]);
}

}  // namespace

void op::Cast::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  const Tensor &x = in[0], &y = out[0];
  const int64_t n = y.numel();
  if (n == 0) return;
  const cudaStream_t stream = cuda::current_stream(y);
  if (x.dtype() == y.dtype()) {
    TS_CUDA_CHECK(cudaMemcpyAsync(y.data_ptr(), x.data_ptr(), y.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  cuda::dispatch_cuda_any(x.dtype(), kName, [&](auto src_tag) {
    using S = typename decltype(src_tag)::type;
    cuda::dispatch_cuda_any(y.dtype(), kName, [&](auto dst_tag) {
      using D = typename decltype(dst_tag)::type;
      const S* px = static_cast<const S*>(x.data_ptr());
      D* py = static_cast<D*>(y.data_ptr());
      if (cuda::packable<4>(px, py))
        cast_kernel<4, S, D><<<cuda::blocks_for(n / 4), 256, 0, stream>>>(px, py, n);
      else
        cast_kernel<1, S, D><<<cuda::blocks_for(n), 256, 0, stream>>>(px, py, n);
      TS_CUDA_LAUNCH_CHECK(kName);
    });
  });
}

}  // namespace tessera
