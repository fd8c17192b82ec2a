// linear (y = x·W + b) on the GPU — one cuBLASLt GEMM with the bias epilogue, or matmul's GEMM
// plus a bias kernel where cuBLASLt has no algorithm (f64, empty inner dimension) — against the
// CPU kernel (label `gpu`; skipped visibly without a GPU): every float dtype and the f32 output of
// bf16/f16 inputs, odd and large sizes, misaligned views, outputs NaN-poisoned first, gradients
// through autograd, autocast, and replay inside a captured CUDA graph. Tolerances relative to the
// result's largest magnitude: f64 1e-10, f32 1e-5 (TF32 on: 1e-2), bf16/f16 1e-2, f32 output 1e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/autocast.h"
#include "core/op.h"
#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"

#ifdef TESSERA_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/common/cuda/blas.h"
#endif

namespace tessera {
namespace {

using namespace gpu_test;

using testing::all_close;
using testing::test_randn;

double tolerance(DType dt, bool f32_output) {
  if (f32_output) return 1e-5;  // the same bf16/f16 products summed in f32 on both sides
  switch (dt) {
    case DType::f64: return 1e-10;
#ifdef TESSERA_WITH_CUDA
    case DType::f32: return cuda::allow_tf32() ? 1e-2 : 1e-5;
#else
    case DType::f32: return 1e-5;
#endif
    default: return 1e-2;  // bf16, f16
  }
}

// linear on GPU inputs into a NaN-poisoned output (host copy of the result).
Tensor gpu_linear(bool f32_output, const std::vector<Tensor>& gpu_in) {
  const op::Linear::Attrs a{f32_output};
  Tensor y = poisoned(output_metas<op::Linear>(a, {gpu_in[0].meta(), gpu_in[1].meta(), gpu_in[2].meta()})[0]);
  call_out<op::Linear>(a, gpu_in, {y});
  return y.to(Device::cpu());
}

// x [n, k], W [k, m] in dt, b [m] in y's dtype; GPU against CPU.
void expect_matches_cpu(int64_t n, int64_t k, int64_t m, DType dt, bool f32_output, uint64_t seed) {
  const std::vector<Tensor> in{random({n, k}, seed, dt), random({k, m}, seed + 1, dt),
                               random({m}, seed + 2, f32_output ? DType::f32 : dt)};
  Tensor want = call<op::Linear>({f32_output}, in)[0];
  Tensor got = gpu_linear(f32_output, {in[0].to(kGpu), in[1].to(kGpu), in[2].to(kGpu)});
  EXPECT_EQ(got.dtype(), want.dtype());
  EXPECT_TRUE(close_to(got, want, tolerance(dt, f32_output)))
      << dtype_name(dt) << (f32_output ? " f32_output" : "") << " n " << n << " k " << k << " m " << m;
}

TEST(CudaLinear, MatchesCpuForEveryDtype) {
  REQUIRE_GPU();
  uint64_t seed = 100;
  for (DType dt : kFloatTypes) {
    expect_matches_cpu(37, 53, 29, dt, false, seed += 3);
    expect_matches_cpu(64, 32, 48, dt, false, seed += 3);   // aligned sizes
    expect_matches_cpu(1, 129, 7, dt, false, seed += 3);    // one row
    expect_matches_cpu(65, 1, 33, dt, false, seed += 3);    // inner size 1
    expect_matches_cpu(5, 17, 1, dt, false, seed += 3);     // one output column
    expect_matches_cpu(4096, 384, 1152, dt, false, seed += 3);
  }
}

TEST(CudaLinear, F32OutputOfHalfInputsMatchesCpu) {
  REQUIRE_GPU();
  uint64_t seed = 200;
  for (DType dt : {DType::bf16, DType::f16}) {
    expect_matches_cpu(37, 53, 29, dt, true, seed += 3);
    expect_matches_cpu(64, 32, 48, dt, true, seed += 3);
    expect_matches_cpu(3, 7, 1, dt, true, seed += 3);
    expect_matches_cpu(4096, 384, 1152, dt, true, seed += 3);
  }
}

TEST(CudaLinear, EmptyInnerDimensionGivesTheBias) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor b = random({5}, 300, dt);
    Tensor y = gpu_linear(false, {empty({3, 0}, TensorOptions(dt).device(kGpu)),
                                  empty({0, 5}, TensorOptions(dt).device(kGpu)), b.to(kGpu)});
    EXPECT_TRUE(all_close(y, expand(reshape(b, {1, 5}), {3, 5}), 0, 0)) << dtype_name(dt);
  }
  EXPECT_EQ(gpu_linear(false, {empty({0, 4}, TensorOptions(DType::f32).device(kGpu)),
                               zeros({4, 3}, TensorOptions(DType::f32).device(kGpu)),
                               zeros({3}, TensorOptions(DType::f32).device(kGpu))})
                .shape(),
            Shape({0, 3}));
}

TEST(CudaLinear, MisalignedViewsMatchCpu) {
  REQUIRE_GPU();
  // Rows 1.. of a [n + 1, k] tensor: x starts k elements in (2·53 bytes for bf16, not 16-aligned).
  uint64_t seed = 400;
  for (DType dt : kFloatTypes)
    for (bool f32_output : {false, true}) {
      if (f32_output && !is_half(dt)) continue;
      const int64_t n = 37, k = 53, m = 29;
      Tensor xf = random({n + 1, k}, seed += 3, dt), w = random({k, m}, seed + 1, dt);
      Tensor bf = random({m + 1}, seed + 2, f32_output ? DType::f32 : dt);
      Tensor x = slice(xf, 0, 1), b = slice(bf, 0, 1);
      Tensor want = call<op::Linear>({f32_output}, {x, w, b})[0];
      Tensor xg = slice(xf.to(kGpu), 0, 1), bg = slice(bf.to(kGpu), 0, 1);
      EXPECT_TRUE(close_to(gpu_linear(f32_output, {xg, w.to(kGpu), bg}), want, tolerance(dt, f32_output)))
          << dtype_name(dt) << (f32_output ? " f32_output" : "");
    }
}

TEST(CudaLinear, GradientsMatchCpu) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = random({37, 53}, 500, dt), w = random({53, 29}, 501, dt), b = random({29}, 502, dt);
    Tensor g = random({37, 29}, 503, dt);
    Tensor xc = x.clone().requires_grad_(), wc = w.clone().requires_grad_(), bc = b.clone().requires_grad_();
    linear(xc, wc, bc).backward(g);
    Tensor xg = x.clone().requires_grad_(), wg = w.clone().requires_grad_(), bg = b.clone().requires_grad_();
    Tensor y = linear(xg.to(kGpu), wg.to(kGpu), bg.to(kGpu));
    ASSERT_EQ(y.device(), kGpu);
    y.backward(g.to(kGpu));
    const double tol = tolerance(dt, false);
    EXPECT_TRUE(close_to(xg.grad(), xc.grad(), tol)) << "dx " << dtype_name(dt);
    EXPECT_TRUE(close_to(wg.grad(), wc.grad(), tol)) << "dW " << dtype_name(dt);
    EXPECT_TRUE(close_to(bg.grad(), bc.grad(), tol)) << "db " << dtype_name(dt);
  }
}

TEST(CudaLinear, AutocastForwardAndBackwardMatchCpu) {
  REQUIRE_GPU();
  for (DType low : {DType::bf16, DType::f16}) {
    Tensor x = random({41, 24}, 600, DType::f32), w = random({24, 18}, 601, DType::f32);
    Tensor b = random({18}, 602, DType::f32), g = random({41, 18}, 603, DType::f32);
    Tensor wc = w.clone().requires_grad_(), bc = b.clone().requires_grad_();
    Tensor wg = w.to(kGpu).requires_grad_(), bg = b.to(kGpu).requires_grad_();
    Tensor yc, yg;
    {
      autocast::Guard amp(low);
      yc = linear(x, wc, bc);
      yg = linear(x.to(kGpu), wg, bg);
    }
    ASSERT_EQ(yg.dtype(), DType::f32);
    EXPECT_TRUE(close_to(yg, yc, 1e-5)) << dtype_name(low);
    yc.backward(g);
    yg.backward(g.to(kGpu));
    EXPECT_EQ(wg.grad().dtype(), DType::f32);
    EXPECT_TRUE(close_to(wg.grad(), wc.grad(), 1e-2)) << "dW " << dtype_name(low);
    EXPECT_TRUE(close_to(bg.grad(), bc.grad(), 1e-5)) << "db " << dtype_name(low);
  }
}

// linear(x, W, b, low) under autocast (x, W and y in the low dtype, b f32: cuBLASLt's f32 bias
// type, or the fallback's f32 sums): y against the CPU's (the f32 sums plus b rounded once), and
// the gradients, db summed in f32 from the low-dtype dy (col_sum).
TEST(CudaLinear, AutocastLowOutputWithF32BiasMatchesCpu) {
  REQUIRE_GPU();
  for (DType low : {DType::bf16, DType::f16})
    for (const Shape& xs : {Shape{41, 24}, Shape{4096, 256}}) {
      const int64_t n = xs[0], k = xs[1], m = k == 24 ? 18 : 384;
      Tensor x = random(xs, 610, DType::f32), w = random({k, m}, 611, DType::f32);
      Tensor b = random({m}, 612, DType::f32), g = cast(random({n, m}, 613, DType::f32), low);
      Tensor wc = w.clone().requires_grad_(), bc = b.clone().requires_grad_();
      Tensor wg = w.to(kGpu).requires_grad_(), bg = b.to(kGpu).requires_grad_();
      Tensor yc, yg, wide;
      {
        autocast::Guard amp(low);
        yc = linear(x, wc, bc, low);
        yg = linear(x.to(kGpu), wg, bg, low);
        wide = linear(x.to(kGpu), wg.detach(), bg.detach());  // the f32 output
      }
      ASSERT_EQ(yg.dtype(), low);
      EXPECT_TRUE(all_close(yg.to(Device::cpu()), cast(wide, low).to(Device::cpu()), 0, 0)) << "bitwise";
      ASSERT_EQ(yc.dtype(), low);
      const std::string what = std::string(dtype_name(low)) + " " + xs.str();
      EXPECT_TRUE(close_to(yg, yc, low == DType::bf16 ? 1e-2 : 2e-3)) << what;
      yc.backward(g);
      yg.backward(g.to(kGpu));
      EXPECT_EQ(wg.grad().dtype(), DType::f32);
      EXPECT_EQ(bg.grad().dtype(), DType::f32);
      EXPECT_TRUE(close_to(wg.grad(), wc.grad(), 1e-2)) << "dW " << what;
      EXPECT_TRUE(close_to(bg.grad(), bc.grad(), 1e-5)) << "db " << what;
    }
}

#ifdef TESSERA_WITH_CUDA

TEST(CudaLinear, ReplaysInsideACapturedGraphOnceWarm) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    const std::vector<Tensor> in{random({37, 53}, 700, dt), random({53, 29}, 701, dt), random({29}, 702, dt)};
    Tensor want = call<op::Linear>({false}, in)[0];
    const std::vector<Tensor> gin{in[0].to(kGpu), in[1].to(kGpu), in[2].to(kGpu)};
    gpu_linear(false, gin);  // warm: handles, workspace, the cached algorithm
    const op::Linear::Attrs a{false};
    Tensor y = poisoned(output_metas<op::Linear>(a, {gin[0].meta(), gin[1].meta(), gin[2].meta()})[0]);
    auto s = static_cast<cudaStream_t>(cuda::stream(0));
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    call_out<op::Linear>(a, gin, {y});
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    EXPECT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    EXPECT_TRUE(close_to(y, want, tolerance(dt, false))) << dtype_name(dt);
  }
}

TEST(CudaLinear, LtHandleIsCreatedWithTheBlasHandle) {
  REQUIRE_GPU();
  ASSERT_NE(cuda::blas_lt_handle(0), nullptr);
  EXPECT_EQ(cuda::blas_lt_handle(0), cuda::blas_lt_handle(0));
  EXPECT_NE(cuda::blas_workspace(0), nullptr);
}

#endif  // TESSERA_WITH_CUDA

}  // namespace
}  // namespace tessera
