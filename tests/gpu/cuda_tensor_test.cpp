// CUDA tensors and the first CUDA kernels against their CPU counterparts (label `gpu`; skipped
// visibly without a GPU). Inputs are random, outputs are poisoned before a kernel runs, and
// tolerances are by dtype: f32/f64 exact for these ops, bf16/f16 within one rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/cuda/runtime.h"
#include "core/op.h"
#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using namespace gpu_test;

using testing::all_close;
using testing::test_randn;

TEST(CudaTensor, RoundTripKeepsEveryByteOfEveryDtype) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::u8}) {
    Tensor x = cast(test_randn({37, 5}, 1, DType::f32), dt);
    Tensor g = x.to(kGpu);
    EXPECT_EQ(g.device(), kGpu);
    EXPECT_EQ(g.dtype(), dt);
    Tensor back = g.to(Device::cpu());
    ASSERT_EQ(std::memcmp(back.data_ptr(), x.data_ptr(), x.nbytes()), 0) << dtype_name(dt);
    EXPECT_EQ(g.to_vector<double>(), x.to_vector<double>()) << "to_vector copies CUDA tensors to the host";
  }
}

TEST(CudaTensor, FullAndFillMakeValuesOnTheDevice) {
  REQUIRE_GPU();
  EXPECT_EQ(full({3, 3}, 2.5, TensorOptions().device(kGpu)).to_vector<float>(), std::vector<float>(9, 2.5f));
  Tensor f = fill(TensorMeta{Shape{1001}, DType::bf16, kGpu}, -0.75);
  EXPECT_EQ(f.to_vector<float>(), std::vector<float>(1001, -0.75f));
  Tensor z = zeros({5}, TensorOptions(DType::f64).device(kGpu));
  EXPECT_EQ(z.to_vector<double>(), std::vector<double>(5, 0.0));
}

TEST(CudaTensor, OutOfMemoryIsAClearErrorAndTheProcessGoesOn) {
  REQUIRE_GPU();
  try {
    Tensor huge = empty({int64_t{1} << 48}, TensorOptions().device(kGpu));  // 1 PiB
    FAIL() << "allocated 1 PiB";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("asked for"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MiB free"), std::string::npos) << e.what();
  }
  Tensor ok = ones({1000}, TensorOptions().device(kGpu));
  EXPECT_EQ(ok.to_vector<float>()[999], 1.0f);
}

TEST(CudaTensor, MemoryStatsCountDeviceTensors) {
  REQUIRE_GPU();
  const size_t before = memory_stats(kGpu).current;
  {
    Tensor t = empty({1 << 20}, TensorOptions().device(kGpu));
    EXPECT_EQ(memory_stats(kGpu).current, before + (4u << 20));
    EXPECT_GE(memory_stats(kGpu).peak, before + (4u << 20));
  }
  EXPECT_EQ(memory_stats(kGpu).current, before);
}

// Runs Add on the GPU into a NaN-poisoned output and compares with the CPU result.
void expect_add_matches_cpu(const Shape& sa, const Shape& sb, DType dt, uint64_t seed) {
  Tensor a = cast(test_randn(sa, seed, DType::f64), dt), b = cast(test_randn(sb, seed + 1, DType::f64), dt);
  Tensor want = add(a, b);
  Tensor got = full(want.shape(), std::numeric_limits<double>::quiet_NaN(), TensorOptions(dt).device(kGpu));
  call_out<op::Add>({}, {a.to(kGpu), b.to(kGpu)}, {got});
  // f32/f64: the same single rounding as the CPU. bf16/f16: the CPU adds in f32 and rounds once,
  // as the GPU does, so these agree exactly too; allow one ulp for safety in the half types.
  const double tol = is_half(dt) ? 1e-2 : 0.0;
  EXPECT_TRUE(all_close(got.to(Device::cpu()), want, tol, tol)) << dtype_name(dt) << " " << sa << " + " << sb;
}

TEST(CudaKernels, AddMatchesCpuForEveryFloatDtypeAndBroadcast) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    expect_add_matches_cpu({1000, 37}, {1000, 37}, dt, 10);  // same shapes (flat loop)
    expect_add_matches_cpu({7, 1, 33}, {5, 1}, dt, 20);       // both sides broadcast
    expect_add_matches_cpu({3, 129}, {129}, dt, 30);           // a bias row
    expect_add_matches_cpu({}, {4, 3}, dt, 40);                // a scalar
  }
}

TEST(CudaKernels, GradientsFlowBackAcrossDevices) {
  REQUIRE_GPU();
  Tensor x = test_randn({6, 4}, 50, DType::f32).requires_grad_();
  Tensor w = test_randn({6, 4}, 51, DType::f32).requires_grad_();
  Tensor xg = x.to(kGpu);
  Tensor y = add(add(xg, w.to(kGpu)), xg);  // x used twice: its gradient accumulates on the GPU
  Tensor seed = test_randn({6, 4}, 52, DType::f32);
  y.backward(seed.to(kGpu));
  ASSERT_TRUE(x.grad().defined() && w.grad().defined());
  EXPECT_EQ(x.grad().device(), Device::cpu());
  EXPECT_TRUE(all_close(x.grad(), add(seed, seed), 0, 0));
  EXPECT_TRUE(all_close(w.grad(), seed, 0, 0));
}

TEST(CudaKernels, ToDeviceGradcheckThroughTheGpu) {
  REQUIRE_GPU();
  // f(x, w) = (x on the GPU) * (w on the GPU) + x, back on the CPU: to_device's backward in both
  // directions, checked against f64 central differences.
  auto f = [](const std::vector<Tensor>& in) {
    return to_device(add(mul(to_device(in[0], kGpu), to_device(in[1], kGpu)), to_device(in[0], kGpu)),
                     Device::cpu());
  };
  EXPECT_TRUE(testing::gradcheck(f, {test_randn({3, 5}, 60), test_randn({5}, 61)}));
}

// An op with a CPU kernel only: what any op without a `cuda` member meets on the GPU.
struct CpuOnlyNegate : OpBase {
  static constexpr const char* kName = "cpu_only_negate";
  static constexpr bool kDifferentiable = false;
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&) { return {in[0]}; }
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
    for (int64_t i = 0; i < in[0].numel(); ++i) out[0].data<float>()[i] = -in[0].data<float>()[i];
  }
};

TEST(CudaKernels, AnOpWithoutACudaKernelSaysSo) {
  static_assert(!detail::has_cuda_kernel<CpuOnlyNegate>::value);
  static_assert(detail::has_cuda_kernel<op::Add>::value);
  EXPECT_EQ(call<CpuOnlyNegate>({}, {ones({2})})[0].to_vector<float>(), std::vector<float>(2, -1.0f));
  REQUIRE_GPU();
  Tensor g = ones({4}, TensorOptions().device(kGpu));
  testing::expect_error<NotImplementedError>([&] { call<CpuOnlyNegate>({}, {g}); }, {"cpu_only_negate", "CUDA"});
}

TEST(CudaKernels, MixingDevicesIsAClearError) {
  REQUIRE_GPU();
  testing::expect_error<DeviceError>([&] { add(ones({4}), ones({4}, TensorOptions().device(kGpu))); },
                                     {"add", "cpu", "cuda:0"});
}

}  // namespace
}  // namespace tessera
