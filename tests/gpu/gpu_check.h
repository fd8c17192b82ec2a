// What the GPU tests share: skipping visibly without a GPU, the device, the floating dtypes
// every kernel is checked in, outputs poisoned before a kernel runs, running one op on GPU
// copies of CPU inputs, and the comparison relative to the result's scale.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/op.h"
#include "core/tensor.h"
#include "gradcheck.h"
#include "kernels/cast/cast.h"

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

/// Runs op `Op` with `attrs` on GPU copies of `in` into poisoned outputs; returns them on the GPU.
template <class Op>
std::vector<Tensor> run_on_gpu(const typename Op::Attrs& attrs, const std::vector<Tensor>& in) {
  const detail::OpInstanceT<Op> op(attrs);
  std::vector<Tensor> gin;
  std::vector<TensorMeta> metas;
  for (const Tensor& t : in) {
    gin.push_back(t.to(kGpu));
    metas.push_back(gin.back().meta());
  }
  std::vector<Tensor> gout;
  for (const TensorMeta& m : op.infer(metas)) gout.push_back(poisoned(m));
  detail::run_op_into(op, gin, gout);
  return gout;
}

/// run_on_gpu with host copies of the outputs.
template <class Op>
std::vector<Tensor> run_on_gpu_host(const typename Op::Attrs& attrs, const std::vector<Tensor>& in) {
  std::vector<Tensor> out = run_on_gpu<Op>(attrs, in);
  for (Tensor& t : out) t = t.to(Device::cpu());
  return out;
}

/// |got − want| <= tol · max |want| elementwise (error relative to the result's scale); either
/// may live on the GPU.
inline ::testing::AssertionResult close_to(const Tensor& got, const Tensor& want, double tol) {
  double scale = 0;
  for (double v : want.to_vector<double>()) scale = std::max(scale, std::abs(v));
  return testing::all_close(got.to(Device::cpu()), want.to(Device::cpu()), 0, tol * scale);
}

/// A GPU copy of t whose data starts one element past an aligned address (a view into a buffer
/// of numel + 1 elements): kernels with packed loads then take their element-by-element paths.
inline Tensor misaligned_on_gpu(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  v.insert(v.begin(), 0.0);
  Tensor buf = cast(from_vector(v, Shape{t.numel() + 1}), t.dtype()).to(kGpu);  // exact: v holds t's values
  auto impl = std::make_shared<TensorImpl>(*buf.impl());
  impl->offset += dtype_size(t.dtype());
  impl->meta.shape = t.shape();
  return Tensor(impl);
}

/// N(0, 1) values of `dt` (drawn in f64, then cast) from a fixed seed.
inline Tensor random(const Shape& s, uint64_t seed, DType dt) {
  return cast(testing::test_randn(s, seed, DType::f64), dt);
}

}  // namespace gpu_test
}  // namespace tessera
