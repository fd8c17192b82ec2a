// What the GPU tests share: skipping visibly without a GPU, the device, whether it runs the
// sm_90a kernels, the tensor-core attention launch count, the floating dtypes
// every kernel is checked in, outputs poisoned before a kernel runs, running one op on GPU
// copies of CPU inputs, and the comparisons: relative to the result's scale, and bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/op.h"
#include "core/tensor.h"
#include "gradcheck.h"
#include "kernels/cast/cast.h"
#ifdef TESSERA_WITH_CUDA
#include "kernels/block_attention/flash_sm80.h"
#include "kernels/block_attention_backward/flash_sm80_backward.h"
#include "kernels/common/cuda/bsmm_tc.h"
#endif

/// Skips the test (visibly, as SKIPPED) on machines without a GPU.
#define REQUIRE_GPU()                                        \
  do {                                                       \
    if (!::tessera::cuda_available()) GTEST_SKIP() << "no GPU visible"; \
  } while (0)

namespace tessera {
namespace gpu_test {

inline const Device kGpu = Device::cuda(0);

/// Whether the GPU runs the sm_90a kernels (bsmm, attention): compute capability 9.0, and the
/// build has them. False without CUDA.
inline bool sm90_here() {
#ifdef TESSERA_WITH_CUDA
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return cuda::have_sm90_kernels() && major == 9 && minor == 0;
#else
  return false;
#endif
}

/// Launches of the tensor-core attention kernels so far, forward plus backward (0 in builds
/// without CUDA): tests check which kernel family ran.
inline uint64_t flash_attention_launches() {
#ifdef TESSERA_WITH_CUDA
  return cuda::flash_forward_launches() + cuda::flash_backward_launches();
#else
  return 0;
#endif
}
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
  std::vector<Tensor> gin;
  std::vector<TensorMeta> metas;
  for (const Tensor& t : in) {
    gin.push_back(t.to(kGpu));
    metas.push_back(gin.back().meta());
  }
  std::vector<Tensor> gout;
  for (const TensorMeta& m : output_metas<Op>(attrs, metas)) gout.push_back(poisoned(m));
  call_out<Op>(attrs, gin, gout);
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

/// The GPU tests' tolerance against the CPU by dtype, relative to the result's scale: f32 1e-5 (no TF32), bf16/f16 1e-2; f64 1e-9.
inline double tol_of(DType dt) { return dt == DType::f64 ? 1e-9 : dt == DType::f32 ? 1e-5 : 1e-2; }

/// Root mean square of the finite values of v (0 when there are none).
inline double rms(const std::vector<double>& v) {
  double s = 0;
  size_t n = 0;
  for (double x : v)
    if (std::isfinite(x)) s += x * x, ++n;
  return n == 0 ? 0.0 : std::sqrt(s / static_cast<double>(n));
}

/// |got − want| <= tol·(|want| + RMS(want)) elementwise (a relative error that does not blow up
/// near zero); same shape and dtype; either may live on the GPU.
inline ::testing::AssertionResult close_rms(const Tensor& got, const Tensor& want, double tol) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype())
    return ::testing::AssertionFailure() << "got " << got.meta() << ", want " << want.meta();
  const std::vector<double> g = got.to(Device::cpu()).to_vector<double>();
  const std::vector<double> w = want.to(Device::cpu()).to_vector<double>();
  const double scale = rms(w);
  for (size_t i = 0; i < w.size(); ++i)
    if (!(std::abs(g[i] - w[i]) <= tol * (std::abs(w[i]) + scale)))
      return ::testing::AssertionFailure() << "element " << i << " of " << want.meta() << ": gpu " << g[i]
                                           << ", cpu " << w[i] << " (tol " << tol << ", scale " << scale << ")";
  return ::testing::AssertionSuccess();
}

/// Same dtype, shape and bytes, element by element (either may live on the GPU); the failure
/// names the first differing element.
inline ::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want) {
  const Tensor a = got.to(Device::cpu()), b = want.to(Device::cpu());
  if (!(a.meta() == b.meta())) return ::testing::AssertionFailure() << "got " << a.meta() << ", want " << b.meta();
  const auto* pa = static_cast<const unsigned char*>(a.data_ptr());
  const auto* pb = static_cast<const unsigned char*>(b.data_ptr());
  const size_t es = dtype_size(b.dtype());
  for (int64_t i = 0; i < b.numel(); ++i)
    if (std::memcmp(pa + i * es, pb + i * es, es) != 0)
      return ::testing::AssertionFailure() << "element " << i << " of " << b.meta() << ": "
                                           << a.to_vector<double>()[i] << " vs " << b.to_vector<double>()[i];
  return ::testing::AssertionSuccess();
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
