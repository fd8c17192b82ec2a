// What the GPU tests share: skipping visibly without a GPU, the device, the floating dtypes
// every kernel is checked in, and outputs poisoned before a kernel runs.
#pragma once

#include <gtest/gtest.h>

#include <limits>

#include "core/device.h"
#include "core/tensor.h"

/// Skips the test (visibly, as SKIPPED) on machines without a GPU.
#define REQUIRE_GPU()                                        \
  do {                                                       \
    if (!::tessera::cuda_available()) GTEST_SKIP() << "no GPU visible"; \
  } while (0)

namespace tessera {
namespace gpu_test {

inline const Device kGpu = Device::cuda(0);
inline constexpr DType kFloatTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

/// An output on the GPU that fails every comparison unless the kernel overwrites all of it:
/// NaN for floating dtypes, 171 for u8, -123456789 for i32.
inline Tensor poisoned(const TensorMeta& m) {
  const double v = is_floating(m.dtype)   ? std::numeric_limits<double>::quiet_NaN()
                   : m.dtype == DType::u8 ? 171
                                          : -123456789;
  return full(m.shape, v, TensorOptions(m.dtype).device(kGpu));
}

}  // namespace gpu_test
}  // namespace tessera
