// matmul through cuBLAS against the CPU kernel (label `gpu`; skipped visibly without a GPU):
// every float dtype, every transpose combination, 2-D and batched, odd sizes, outputs poisoned
// with NaN before the run. Tolerances relative to the result's largest magnitude: f64 1e-10,
// f32 1e-5 (TF32 off, the default), bf16/f16 1e-2; TF32 on: 1e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "core/op.h"
#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"

#ifdef TESSERA_WITH_CUDA
#include "kernels/common/cuda/blas.h"
#endif

namespace tessera {
namespace {

using namespace gpu_test;

using testing::all_close;
using testing::test_randn;

double tolerance(DType dt) {
  switch (dt) {
    case DType::f64: return 1e-10;
    case DType::f32: return 1e-5;
    default: return 1e-2;  // bf16, f16
  }
}

// matmul on the GPU into a NaN-poisoned output (host copy of the result).
Tensor gpu_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const op::Matmul::Attrs mm{ta, tb};
  const std::vector<Tensor> in{a.to(kGpu), b.to(kGpu)};
  const TensorMeta m = output_metas<op::Matmul>(mm, {in[0].meta(), in[1].meta()})[0];
  Tensor c = full(m.shape, std::numeric_limits<double>::quiet_NaN(), TensorOptions(m.dtype).device(kGpu));
  call_out<op::Matmul>(mm, in, {c});
  return c.to(Device::cpu());
}

// A, B shaped for C [batch?, m, n] = op(A)·op(B) with inner size k.
void expect_matches_cpu(int64_t batch, int64_t m, int64_t k, int64_t n, bool ta, bool tb, DType dt, uint64_t seed,
                        double tol) {
  auto shape = [&](int64_t rows, int64_t cols) { return batch ? Shape{batch, rows, cols} : Shape{rows, cols}; };
  Tensor a = random(ta ? shape(k, m) : shape(m, k), seed, dt);
  Tensor b = random(tb ? shape(n, k) : shape(k, n), seed + 1, dt);
  Tensor want = matmul(a, b, ta, tb);
  EXPECT_TRUE(close_to(gpu_matmul(a, b, ta, tb), want, tol))
      << dtype_name(dt) << " batch " << batch << " m " << m << " k " << k << " n " << n << " ta " << ta << " tb "
      << tb;
}

TEST(CudaMatmul, MatchesCpuForEveryDtypeAndTransposeIn2D) {
  REQUIRE_GPU();
  uint64_t seed = 100;
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        expect_matches_cpu(0, 37, 19, 53, ta, tb, dt, seed += 2, tolerance(dt));
        expect_matches_cpu(0, 1, 129, 7, ta, tb, dt, seed += 2, tolerance(dt));   // one row, long inner dim
        expect_matches_cpu(0, 65, 1, 33, ta, tb, dt, seed += 2, tolerance(dt));   // inner size 1
        expect_matches_cpu(0, 130, 257, 3, ta, tb, dt, seed += 2, tolerance(dt));
      }
}

TEST(CudaMatmul, MatchesCpuBatched) {
  REQUIRE_GPU();
  uint64_t seed = 200;
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        expect_matches_cpu(3, 37, 29, 41, ta, tb, dt, seed += 2, tolerance(dt));
        expect_matches_cpu(7, 5, 64, 1, ta, tb, dt, seed += 2, tolerance(dt));
        expect_matches_cpu(1, 19, 11, 23, ta, tb, dt, seed += 2, tolerance(dt));  // batch of one
      }
}

TEST(CudaMatmul, EmptyInnerDimensionGivesZeros) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor c = gpu_matmul(empty({3, 0}, dt), empty({0, 5}, dt), false, false);
    EXPECT_EQ(c.to_vector<double>(), std::vector<double>(15, 0.0)) << dtype_name(dt);
    Tensor cb = gpu_matmul(empty({2, 0, 4}, dt), empty({2, 3, 0}, dt), true, true);
    EXPECT_EQ(cb.to_vector<double>(), std::vector<double>(24, 0.0)) << dtype_name(dt);
  }
}

TEST(CudaMatmul, GradientsMatchCpu) {
  REQUIRE_GPU();
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Tensor a = random(ta ? Shape{2, 13, 9} : Shape{2, 9, 13}, 300, DType::f32);
      Tensor b = random(tb ? Shape{2, 17, 13} : Shape{2, 13, 17}, 301, DType::f32);
      Tensor seed = random({2, 9, 17}, 302, DType::f32);
      Tensor ac = a.clone().requires_grad_(), bc = b.clone().requires_grad_();
      matmul(ac, bc, ta, tb).backward(seed);
      Tensor ag = a.clone().requires_grad_(), bg = b.clone().requires_grad_();
      Tensor y = matmul(ag.to(kGpu), bg.to(kGpu), ta, tb);
      ASSERT_EQ(y.device(), kGpu);
      y.backward(seed.to(kGpu));
      EXPECT_TRUE(close_to(ag.grad(), ac.grad(), 1e-5)) << "dA, ta " << ta << " tb " << tb;
      EXPECT_TRUE(close_to(bg.grad(), bc.grad(), 1e-5)) << "dB, ta " << ta << " tb " << tb;
    }
}

#ifdef TESSERA_WITH_CUDA

// Restores the TF32 switch when a test ends.
struct Tf32Guard {
  bool saved = cuda::allow_tf32();
  ~Tf32Guard() { cuda::set_allow_tf32(saved); }
};

TEST(CudaMatmul, Tf32IsOffUnlessAskedFor) {
  REQUIRE_GPU();
  const char* env = std::getenv("TESSERA_ALLOW_TF32");
  if (!env || std::string(env) == "0" || std::string(env).empty()) EXPECT_FALSE(cuda::allow_tf32());
  Tf32Guard guard;
  cuda::set_allow_tf32(false);
  EXPECT_FALSE(cuda::allow_tf32());
  expect_matches_cpu(0, 77, 301, 45, false, true, DType::f32, 400, 1e-5);  // full f32 precision
  cuda::set_allow_tf32(true);
  EXPECT_TRUE(cuda::allow_tf32());
  // TF32 rounds the inputs to 10 mantissa bits: about 1e-3 relative, accumulation stays f32.
  expect_matches_cpu(0, 77, 301, 45, false, true, DType::f32, 400, 1e-2);
  expect_matches_cpu(4, 33, 65, 17, true, false, DType::f32, 402, 1e-2);
  // Only f32 changes: f64 keeps its precision.
  expect_matches_cpu(0, 37, 19, 53, false, false, DType::f64, 404, 1e-10);
}

TEST(CudaMatmul, OneBlasHandlePerDeviceBoundToItsStream) {
  REQUIRE_GPU();
  cublasHandle_t h = cuda::blas_handle(0);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(cuda::blas_handle(0), h);
  cudaStream_t s = nullptr;
  TS_CUBLAS_CHECK(cublasGetStream(h, &s));
  EXPECT_EQ(static_cast<void*>(s), cuda::stream(0));
}

TEST(CudaMatmul, CublasErrorsNameTheCallAndTheStatus) {
  REQUIRE_GPU();
  testing::expect_error<DeviceError>([] { TS_CUBLAS_CHECK(cublasSetStream(nullptr, nullptr)); },
                                     {"cublasSetStream", "CUBLAS_STATUS_"});
}

#endif  // TESSERA_WITH_CUDA

}  // namespace
}  // namespace tessera
