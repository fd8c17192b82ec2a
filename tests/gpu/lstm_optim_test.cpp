// CUDA kernels of the fused LSTM gates (lstm_gates, lstm_gates_backward) and the fused
// optimizer updates (sgd_update, adam_update in both decay modes, adafactor_update,
// adafactor_factored_update) against their CPU kernels (label `gpu`; skipped visibly without a
// GPU). lr and step are 0-d f64 tensors on the GPU, as a compiled step feeds them.
// Inputs are random, sizes odd (1, 7, 33, 1000, 4097), every floating dtype; GPU outputs are
// NaN-poisoned before the kernel runs. Tolerance |gpu − cpu| <= tol·(|cpu| + RMS(cpu)), tol
// 1e-5 for f32, 1e-9 for f64, 1e-2 for bf16/f16. The updates also run in place (outputs
// sharing the buffers of p and the state), as executors run them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
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

using testing::test_rand;
using testing::test_randn;

const int64_t kSizes[] = {1, 7, 33, 1000, 4097};

Tensor randn(const Shape& s, uint64_t seed, DType dt, double scale = 1.0) {
  return cast(mul(test_randn(s, seed, DType::f64), scale), dt);
}
Tensor uniform(const Shape& s, double lo, double hi, uint64_t seed, DType dt) {
  return cast(test_rand(s, lo, hi, seed, DType::f64), dt);
}
Tensor scalar(double v) { return full({}, v, DType::f64); }

std::vector<Tensor> to_gpu(const std::vector<Tensor>& in) {
  std::vector<Tensor> out;
  for (const Tensor& t : in) out.push_back(t.to(kGpu));
  return out;
}
std::vector<Tensor> to_cpu(const std::vector<Tensor>& in) {
  std::vector<Tensor> out;
  for (const Tensor& t : in) out.push_back(t.to(Device::cpu()));
  return out;
}

// Runs an update op on the GPU in place: output k is written into the GPU copy of input
// in_place[k] (p and its state).
template <class Op>
std::vector<Tensor> run_gpu_in_place(const typename Op::Attrs& attrs, const std::vector<Tensor>& in,
                                     const std::vector<int>& in_place) {
  const std::vector<Tensor> gin = to_gpu(in);
  std::vector<Tensor> gout;
  for (int k : in_place) gout.push_back(gin[k]);
  call_out<Op>(attrs, gin, gout);
  return to_cpu(gout);
}

std::string label(DType dt, const Shape& s, const std::string& more = "") {
  std::ostringstream os;
  os << dtype_name(dt) << " " << s << (more.empty() ? "" : " ") << more;
  return os.str();
}

// Every output of Op on the GPU (poisoned outputs, and in place when `in_place` is given)
// against the CPU kernel.
template <class Op>
void expect_op_matches(const typename Op::Attrs& attrs, const std::vector<Tensor>& in, const std::string& what,
                       const std::vector<int>& in_place = {}) {
  const std::vector<Tensor> want = call<Op>(attrs, in);
  const std::vector<Tensor> got = run_on_gpu_host<Op>(attrs, in);
  const double tol = tol_of(in[0].dtype());
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_TRUE(close_rms(got[k], want[k], tol)) << Op::kName << " output " << k << ": " << what;
  if (in_place.empty()) return;
  const std::vector<Tensor> inplace = run_gpu_in_place<Op>(attrs, in, in_place);
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_TRUE(same_bits(inplace[k], got[k])) << Op::kName << " in place, output " << k << ": " << what;
}

// ---- LSTM gates ----

TEST(CudaLstm, GatesForwardAndBackwardMatchTheCpu) {
  REQUIRE_GPU();
  uint64_t seed = 1;
  for (DType dt : kFloatTypes) {
    for (int64_t h : kSizes) {
      for (double forget_bias : {0.0, 1.0}) {
        const int64_t n = 3;
        Tensor pre = randn({n, 4 * h}, ++seed, dt, 2.0), c_prev = randn({n, h}, ++seed, dt);
        const std::string what = label(dt, pre.shape(), "forget_bias " + std::to_string(forget_bias));
        expect_op_matches<op::LstmGates>({forget_bias}, {pre, c_prev}, what);
        // Backward from the CPU forward's saved gates and tanh(c).
        const std::vector<Tensor> fwd = call<op::LstmGates>({forget_bias}, {pre, c_prev});
        Tensor dh = randn({n, h}, ++seed, dt), dc = randn({n, h}, ++seed, dt);
        expect_op_matches<op::LstmGatesBackward>({}, {dh, dc, fwd[2], fwd[3], c_prev}, what);
      }
    }
  }
}

// ---- SGD, Adam, AdamW ----

TEST(CudaOptim, SgdUpdateEveryVariantAndInPlace) {
  REQUIRE_GPU();
  const op::SgdUpdate::Attrs variants[] = {
      {0.0, 0.0, 0.0, false}, {0.9, 0.0, 0.01, false}, {0.9, 0.1, 0.0, false}, {0.9, 0.0, 0.01, true}};
  uint64_t seed = 100;
  for (DType dt : kFloatTypes) {
    for (int64_t n : kSizes) {
      for (const op::SgdUpdate::Attrs& a : variants) {
        for (double t : {1.0, 3.0}) {
          Tensor p = randn({n}, ++seed, dt), g = randn({n}, ++seed, dt), buf = randn({n}, ++seed, dt);
          const std::string what = label(dt, p.shape(), "momentum " + std::to_string(a.momentum) + " step " +
                                                            std::to_string(t) + (a.nesterov ? " nesterov" : ""));
          expect_op_matches<op::SgdUpdate>(a, {p, g, buf, scalar(0.05), scalar(t)}, what, {0, 2});
        }
      }
    }
  }
}

void expect_adam_family_matches(AdamDecay decay) {
  using Op = op::AdamUpdate;
  const Op::Attrs variants[] = {{0.9, 0.999, 1e-8, decay, 0.0}, {0.8, 0.99, 1e-6, decay, 0.1}};
  uint64_t seed = 200;
  for (DType dt : kFloatTypes) {
    for (const Shape& s : {Shape{1}, Shape{7}, Shape{33}, Shape{1000}, Shape{4097}, Shape{7, 33}}) {
      for (const Op::Attrs& a : variants) {
        for (double t : {1.0, 10.0}) {
          Tensor p = randn(s, ++seed, dt), g = randn(s, ++seed, dt), m = randn(s, ++seed, dt, 0.1);
          Tensor v = uniform(s, 0.0, 0.5, ++seed, dt);
          const std::string what = label(dt, s, "wd " + std::to_string(a.weight_decay) + " step " + std::to_string(t));
          expect_op_matches<Op>(a, {p, g, m, v, scalar(1e-2), scalar(t)}, what, {0, 2, 3});
        }
      }
    }
  }
}

TEST(CudaOptim, AdamUpdateCoupledMatchesTheCpuAndRunsInPlace) {
  REQUIRE_GPU();
  expect_adam_family_matches(AdamDecay::coupled);
}

TEST(CudaOptim, AdamUpdateDecoupledMatchesTheCpuAndRunsInPlace) {
  REQUIRE_GPU();
  expect_adam_family_matches(AdamDecay::decoupled);
}

TEST(CudaOptim, TheLearningRateAndStepAreReadOnTheDevice) {
  REQUIRE_GPU();
  // The same GPU inputs with two different lr/step tensors give the two CPU results.
  Tensor p = randn({1000}, 300, DType::f32), g = randn({1000}, 301, DType::f32);
  Tensor m = randn({1000}, 302, DType::f32, 0.1), v = uniform({1000}, 0.0, 0.5, 303, DType::f32);
  const op::AdamUpdate::Attrs a{0.9, 0.999, 1e-8, AdamDecay::decoupled, 0.01};
  for (double lr : {1e-3, 3e-2}) {
    for (double t : {1.0, 100.0}) {
      const std::vector<Tensor> in{p, g, m, v, scalar(lr), scalar(t)};
      EXPECT_TRUE(close_rms(run_on_gpu_host<op::AdamUpdate>(a, in)[0], call<op::AdamUpdate>(a, in)[0], 1e-5))
          << lr << " " << t;
    }
  }
}

// ---- Adafactor ----

std::vector<AdafactorAttrs> adafactor_variants() {
  AdafactorAttrs plain;
  AdafactorAttrs relative = plain;
  relative.relative_step = relative.scale_parameter = true;
  relative.weight_decay = 0.01;
  AdafactorAttrs clipped = plain;
  clipped.clip_threshold = 0.05;  // RMS(u) is about 1: the update is clipped
  clipped.scale_parameter = true;
  return {plain, relative, clipped};
}

TEST(CudaOptim, AdafactorUpdateMatchesTheCpuAndRunsInPlace) {
  REQUIRE_GPU();
  uint64_t seed = 400;
  for (DType dt : kFloatTypes) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{1000}, int64_t{4097}, int64_t{20001}}) {
      for (const AdafactorAttrs& a : adafactor_variants()) {
        for (double t : {1.0, 7.0}) {
          Tensor p = randn({n}, ++seed, dt), g = randn({n}, ++seed, dt), v = uniform({n}, 0.01, 1.0, ++seed, dt);
          const std::vector<Tensor> in{p, g, v, scalar(1e-2), scalar(t)};
          const std::string what = label(dt, p.shape(), "clip " + std::to_string(a.clip_threshold) + " step " +
                                                            std::to_string(t));
          expect_op_matches<op::AdafactorUpdate>(a, in, what, {0, 2});
          EXPECT_TRUE(same_bits(run_on_gpu_host<op::AdafactorUpdate>(a, in)[0], run_on_gpu_host<op::AdafactorUpdate>(a, in)[0])) << what;
        }
      }
    }
  }
}

TEST(CudaOptim, AdafactorFactoredUpdateMatchesTheCpuAndRunsInPlace) {
  REQUIRE_GPU();
  uint64_t seed = 500;
  for (DType dt : kFloatTypes) {
    for (const Shape& s :
         {Shape{1, 1}, Shape{7, 33}, Shape{2, 33, 7}, Shape{1000, 5}, Shape{4097, 3}, Shape{3, 1, 1000}}) {
      for (const AdafactorAttrs& a : adafactor_variants()) {
        for (double t : {1.0, 7.0}) {
          Tensor p = randn(s, ++seed, dt), g = randn(s, ++seed, dt);
          Tensor st = uniform(detail::adafactor_factored_shape(s), 0.01, 1.0, ++seed, dt);
          const std::vector<Tensor> in{p, g, st, scalar(1e-2), scalar(t)};
          const std::string what = label(dt, s, "clip " + std::to_string(a.clip_threshold) + " step " +
                                                    std::to_string(t));
          expect_op_matches<op::AdafactorFactoredUpdate>(a, in, what, {0, 2});
          EXPECT_TRUE(same_bits(run_on_gpu_host<op::AdafactorFactoredUpdate>(a, in)[0],
                                run_on_gpu_host<op::AdafactorFactoredUpdate>(a, in)[0]))
              << what;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera
