// dropout's Philox-base input on the GPU (the device scalar compiled steps write before each
// CUDA-graph replay): the kernel reads the base on the device and draws the CPU's mask for
// start + base, bit for bit, into outputs poisoned first; changing the base's contents on the
// device (stream-ordered, as the executor does) moves the next draw without a new op.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/op.h"
#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using namespace gpu_test;
using testing::test_randn;

// Dropout (p, seed, start) with the base on x's device, into an output poisoned first.
Tensor drop_into_poisoned(const Tensor& x, double p, uint64_t seed, uint64_t start, const Tensor& base) {
  const op::Dropout::Attrs a{p, seed, start};
  Tensor y = x.device().is_cuda() ? poisoned(x.meta()) : empty(x.shape(), TensorOptions(x.dtype()));
  call_out<op::Dropout>(a, {x, base}, {y});
  return y;
}

TEST(CudaPhiloxBase, DropoutDrawsTheCpuMaskForStartPlusBase) {
  REQUIRE_GPU();
  uint64_t seed = 900;
  const uint64_t kBases[] = {0, 3, 0xFFFFFFFFull, (uint64_t{7} << 32) + 5, ~uint64_t{0} - 2};
  for (DType dt : kFloatTypes)
    for (const Shape& s : {Shape{1}, Shape{7}, Shape{1001}, Shape{33, 65}})
      for (uint64_t base : kBases) {
        const Tensor x = cast(test_randn(s, ++seed), dt);
        const uint64_t start = seed % 5;
        const Tensor want = call<op::Dropout>({0.4, seed, start + base}, {x})[0];  // attribute-only form
        const Tensor cpu = drop_into_poisoned(x, 0.4, seed, start, philox_base(base));
        const Tensor gpu = drop_into_poisoned(x.to(kGpu), 0.4, seed, start, philox_base(base, kGpu));
        const std::string what = std::string(dtype_name(dt)) + s.str() + " base " + std::to_string(base);
        EXPECT_EQ(cpu.to_vector<double>(), want.to_vector<double>()) << what;
        EXPECT_EQ(gpu.to_vector<double>(), want.to_vector<double>()) << what;
      }
}

TEST(CudaPhiloxBase, TheKernelReadsTheBaseOnTheDevice) {
  REQUIRE_GPU();
  const Tensor x = test_randn({257}, 5, DType::f32).to(kGpu);
  const Tensor base = philox_base(0, kGpu);
  const op::Dropout::Attrs a{0.5, 77, 2};
  std::vector<std::vector<float>> got;
  for (uint64_t b : {uint64_t{10}, uint64_t{1} << 33, uint64_t{10}}) {
    // Overwrite the base's words on the device, ordered before the kernel on the stream.
    const uint32_t words[2] = {static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32)};
    cuda::copy(base.data_ptr(), kGpu, words, Device::cpu(), sizeof words);
    Tensor y = poisoned(x.meta());
    call_out<op::Dropout>(a, {x, base}, {y});
    got.push_back(y.to_vector<float>());
    EXPECT_EQ(got.back(), call<op::Dropout>({0.5, 77, 2 + b}, {x.to(Device::cpu())})[0].to_vector<float>()) << b;
  }
  EXPECT_NE(got[0], got[1]);
  EXPECT_EQ(got[0], got[2]);
}

TEST(CudaPhiloxBase, BackwardRedrawsTheForwardMask) {
  REQUIRE_GPU();
  const uint64_t b = (uint64_t{1} << 32) + 123;
  const Tensor xc = test_randn({9, 31}, 6, DType::f32), gc = test_randn({9, 31}, 7, DType::f32);
  const Tensor xg = xc.to(kGpu).detach().requires_grad_(), xr = xc.detach().requires_grad_();
  call<op::Dropout>({0.3, 8, 1}, {xg, philox_base(b, kGpu)})[0].backward(gc.to(kGpu));
  call<op::Dropout>({0.3, 8, 1 + b}, {xr})[0].backward(gc);
  EXPECT_EQ(xg.grad().to_vector<float>(), xr.grad().to_vector<float>());
}

}  // namespace
}  // namespace tessera
