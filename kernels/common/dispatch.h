// Dtype dispatch for CPU kernels: run a generic lambda with T bound to the element type.
//
//   dispatch_float(out.dtype(), "softmax", [&](auto tag) {
//     using T = typename decltype(tag)::type;
//     ...
//   });
#pragma once

#include "core/error.h"
#include "core/tensor.h"

namespace tessera {

template <class T> struct TypeTag { using type = T; };

/// f32 or f64 (CPU compute types; bf16/f16 reach kernels widened to f32).
template <class F> void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: f(TypeTag<float>{}); return;
    case DType::f64: f(TypeTag<double>{}); return;
    default: TS_THROW(DTypeError, op << ": no CPU kernel for dtype " << t << " (expected f32 or f64)");
  }
}

/// f32, f64, i32 or u8.
template <class F> void dispatch_numeric(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: f(TypeTag<float>{}); return;
    case DType::f64: f(TypeTag<double>{}); return;
    case DType::i32: f(TypeTag<int32_t>{}); return;
    case DType::u8: f(TypeTag<uint8_t>{}); return;
    default: TS_THROW(DTypeError, op << ": no CPU kernel for dtype " << t);
  }
}

/// Element count above which CPU loops split across OpenMP threads.
constexpr int64_t kParallelGrain = 32768;

}  // namespace tessera
