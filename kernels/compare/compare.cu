// compare on the GPU: y = (a <mode> b) as u8 (1 true, 0 false), one thread per output element.
//   two tensors: a, b of one dtype, broadcast against y's shape (numpy rules), compared as the CPU
//                does: bf16/f16 widened to f32 (exact), others as they are;
//   scalar s:    floating x meets s rounded to its compute type (f32 for f32/bf16/f16, f64 for
//                f64); integer x compares in f64, so x < 0.5 keeps its meaning.
#include <cstdint>
#include <type_traits>

#include "kernels/common/cuda/broadcast.cuh"
#include "kernels/compare/compare.h"

namespace tessera {

namespace {

// Values as compared: bf16/f16 as f32, everything else as itself.
__device__ __forceinline__ float cmp_value(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float cmp_value(__half v) { return __half2float(v); }
template <class T>
__device__ __forceinline__ T cmp_value(T v) {
  return v;
}

template <class C>
__device__ __forceinline__ uint8_t compare_values(CompareMode mode, C a, C b) {
  switch (mode) {
    case CompareMode::eq: return a == b;
    case CompareMode::ne: return a != b;
    case CompareMode::lt: return a < b;
    case CompareMode::le: return a <= b;
    case CompareMode::gt: return a > b;
    case CompareMode::ge: return a >= b;
  }
  return 0;
}

// y[i] = a[ia] <mode> b[ib], (ia, ib) the broadcast offsets of output element i.
template <class T>
__global__ void compare_tensors(const T* a, const T* b, uint8_t* y, int64_t n, cuda::BroadcastN<2> ix,
                                CompareMode mode) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t o[2];
    ix.offsets(i, o);
    y[i] = compare_values(mode, cmp_value(a[o[0]]), cmp_value(b[o[1]]));
  }
}

// y[i] = C(x[i]) <mode> s.
template <class T, class C>
__global__ void compare_scalar(const T* x, uint8_t* y, int64_t n, C s, CompareMode mode) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = compare_values(mode, static_cast<C>(cmp_value(x[i])), s);
}

}  // namespace

void op::Compare::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor& y = out[0];
  const int64_t n = y.numel();
  if (n == 0) return;
  uint8_t* py = static_cast<uint8_t*>(y.data_ptr());
  const cudaStream_t stream = cuda::current_stream(y);
  cuda::dispatch_cuda_any(in[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pa = static_cast<const T*>(in[0].data_ptr());
    if (attrs.scalar) {
      using C = std::conditional_t<std::is_integral<T>::value, double, cuda::acc_t<T>>;
      compare_scalar<T, C>
          <<<cuda::blocks_for(n), 256, 0, stream>>>(pa, py, n, static_cast<C>(*attrs.scalar), attrs.mode);
    } else {
      const auto ix = cuda::make_broadcast<2>(y.shape(), {in[0].shape(), in[1].shape()}, kName);
      compare_tensors<T>
          <<<cuda::blocks_for(n), 256, 0, stream>>>(pa, static_cast<const T*>(in[1].data_ptr()), py, n, ix, attrs.mode);
    }
    TS_CUDA_LAUNCH_CHECK(kName);
  });
}

}  // namespace tessera
