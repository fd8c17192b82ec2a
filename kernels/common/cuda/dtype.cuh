// Element types of CUDA kernels: dispatch from a DType, and the accumulation type of each
// (bf16/f16 load as f32, compute in f32, round once when stored).
//
//   dispatch_cuda_float(y.dtype(), "add", [&](auto tag) {
//     using T = typename decltype(tag)::type;        // float, double, __nv_bfloat16 or __half
//     using A = acc_t<T>;                             // float, double, float, float
//     ... A v = to_acc(x[i]); y[i] = from_acc<T>(v); ...
//   });
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"

namespace tessera {
namespace cuda {

template <class T>
struct TypeTag {
  using type = T;
};

template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }

template <class T>
__device__ __forceinline__ T from_acc(acc_t<T> v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);  // round to nearest even, like the CPU conversion
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else {
    return v;
  }
}

/// Calls f(TypeTag<T>{}) for every dtype (f32, f64, bf16, f16, i32, u8); DTypeError naming `op`
/// for any other.
template <class F>
void dispatch_cuda_any(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::f32: return f(TypeTag<float>{});
    case DType::f64: return f(TypeTag<double>{});
    case DType::bf16: return f(TypeTag<__nv_bfloat16>{});
    case DType::f16: return f(TypeTag<__half>{});
    case DType::i32: return f(TypeTag<int32_t>{});
    case DType::u8: return f(TypeTag<uint8_t>{});
  }
  TS_THROW(DTypeError, op << ": no CUDA kernel for dtype " << dt);
}

/// Calls f(TypeTag<T>{}) for the floating dtypes; DTypeError naming `op` otherwise.
/// Calls launch(TypeTag<TO>{}) with an op's output element type for inputs of type T: float when
/// f32_output (autocast's form, which the ops allow for bf16/f16 inputs only), else T.
template <class T, class F>
void with_output_type(bool f32_output, F&& launch) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    launch(TypeTag<T>{});  // f32_output is refused for these
  } else if (f32_output) {
    launch(TypeTag<float>{});
  } else {
    launch(TypeTag<T>{});
  }
}

template <class F>
void dispatch_cuda_float(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::f32: return f(TypeTag<float>{});
    case DType::f64: return f(TypeTag<double>{});
    case DType::bf16: return f(TypeTag<__nv_bfloat16>{});
    case DType::f16: return f(TypeTag<__half>{});
    default: break;
  }
  TS_THROW(DTypeError, op << ": no CUDA kernel for dtype " << dt);
}

}  // namespace cuda
}  // namespace tessera
