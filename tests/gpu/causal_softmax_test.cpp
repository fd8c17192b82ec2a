// CUDA kernels of causal_softmax and causal_softmax_backward against their CPU kernels (label
// `gpu`; skipped visibly without a GPU). Shapes cover every launch plan: one warp per row with
// K = 1..32 keys per lane (S up to 1024), one block per row with the row cached in shared memory
// (S = 1025, 4097) and re-read from global memory (S = 13001, past the 40 KiB cache; S = 4097 in
// the f64 backward), odd T and S, S > T, 1 to 3 batch dims. Inputs random, every floating dtype,
// outputs poisoned (NaN) first.
// Tolerance |gpu − cpu| <= tol·(|cpu| + rms(cpu)): 1e-5 f32, 1e-9 f64, 1e-2 bf16/f16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "core/op.h"
#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using namespace gpu_test;

using testing::test_randn;

// |got − want| <= tol·(|want| + rms(want)) elementwise (a NaN left by the poison fails), and
// exact zeros at the masked keys s > t + S − T of [..., T, S]; same meta.
::testing::AssertionResult close(const Tensor& got, const Tensor& want, double tol) {
  if (!(got.meta() == want.meta()))
    return ::testing::AssertionFailure() << "got " << got.meta() << ", want " << want.meta();
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  const int64_t T = want.shape()[-2], S = want.shape()[-1];
  const double scale = rms(w);
  for (size_t i = 0; i < w.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i) / S, s = static_cast<int64_t>(i) % S;
    const bool masked = s > r % T + S - T;
    const bool ok = masked ? g[i] == 0.0 : std::abs(g[i] - w[i]) <= tol * (std::abs(w[i]) + scale);
    if (!ok)
      return ::testing::AssertionFailure() << "element " << i << " of " << want.meta() << ": gpu " << g[i]
                                           << ", cpu " << w[i] << " (tol " << tol << ", scale " << scale << ")";
  }
  return ::testing::AssertionSuccess();
}

const Shape kShapes[] = {
    {1, 1},            // T = S = 1
    {7, 7},            // K = 1
    {3, 5, 9},         // S > T
    {2, 3, 17, 33},    // K = 2, two batch dims, S > T
    {2, 31, 100},      // K = 4
    {2, 2, 129, 129},  // K = 8
    {5, 257, 300},     // K = 16
    {2, 77, 1000},     // K = 32
    {2, 9, 1025},      // block per row, cached
    {5, 4097},         // block per row, cached (f64 backward: re-read)
    {3, 13001},        // block per row, re-read (past the 40 KiB cache)
    {2, 1, 3, 5, 8},   // three batch dims
};

std::string label(DType dt, const Shape& s) {
  std::ostringstream os;
  os << dtype_name(dt) << " " << s;
  return os.str();
}

TEST(CudaCausalSoftmax, ForwardMatchesCpu) {
  REQUIRE_GPU();
  uint64_t seed = 1;
  for (DType dt : kFloatTypes) {
    for (const Shape& s : kShapes) {
      for (double scale : {1.0, 0.37}) {
        // Scores of a few units (scaled N(0, 3²)), so rows are neither flat nor one-hot.
        Tensor x = cast(mul(test_randn(s, seed++, DType::f64), 3.0), dt);
        const op::CausalSoftmax::Attrs attrs{scale};
        const Tensor want = call<op::CausalSoftmax>(attrs, {x})[0];
        const Tensor got = run_on_gpu_host<op::CausalSoftmax>(attrs, {x})[0];
        EXPECT_TRUE(close(got, want, tol_of(dt))) << label(dt, s) << " scale " << scale;
        EXPECT_TRUE(same_bits(got, run_on_gpu_host<op::CausalSoftmax>(attrs, {x})[0])) << "not reproducible: " << label(dt, s);
      }
    }
  }
}

TEST(CudaCausalSoftmax, BackwardMatchesCpu) {
  REQUIRE_GPU();
  uint64_t seed = 100;
  for (DType dt : kFloatTypes) {
    for (const Shape& s : kShapes) {
      const double scale = 0.37;
      Tensor y = causal_softmax(cast(mul(test_randn(s, seed++, DType::f64), 3.0), dt), scale);  // [..., T, S]
      Tensor g = cast(test_randn(s, seed++, DType::f64), dt);
      const op::CausalSoftmaxBackward::Attrs attrs{scale};
      const Tensor want = call<op::CausalSoftmaxBackward>(attrs, {g, y})[0];
      const Tensor got = run_on_gpu_host<op::CausalSoftmaxBackward>(attrs, {g, y})[0];
      EXPECT_TRUE(close(got, want, tol_of(dt))) << label(dt, s);
    }
  }
}

TEST(CudaCausalSoftmax, AutogradOnTheGpu) {
  REQUIRE_GPU();
  // d/dx of sum(causal_softmax(x)·w) on the GPU equals the CPU's (f64).
  Tensor x = test_randn({2, 5, 9}, 7), w = test_randn({2, 5, 9}, 8);
  Tensor xc = x.clone().requires_grad_(), xg = x.to(kGpu).requires_grad_();
  sum(mul(causal_softmax(xc, 0.6), w)).backward();
  sum(mul(causal_softmax(xg, 0.6), w.to(kGpu))).backward();
  EXPECT_TRUE(testing::all_close(xg.grad().to(Device::cpu()), xc.grad(), 1e-10, 1e-12));
}

}  // namespace
}  // namespace tessera
