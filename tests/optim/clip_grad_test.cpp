// Global-norm clipping: clip_grad_norm's norm and scaled gradients against hand values
// (mixed f32/f64, parameters without gradient), non-finite norms (returned, gradients left
// alone, or an error), the traceable pieces, and Optimizer::set_clip_norm equal to
// clip_grad_norm followed by a plain step.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using optim::clip_grad_norm;
using testing::all_close;
using testing::expect_error;
using testing::test_randn;

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Params {
  Tensor a = tensor({0.0, 0.0}).requires_grad_();                      // f32
  Tensor b = zeros({2, 1}, DType::f64).requires_grad_();               // f64
  Tensor c = zeros({3}).requires_grad_();                              // no gradient
  Params() {
    a.set_grad(tensor({3.0, 4.0}));
    b.set_grad(tensor({12.0, 0.0}, {2, 1}, DType::f64));
  }
  std::vector<Tensor> all() const { return {a, b, c}; }
};

TEST(ClipGradNorm, ScalesWhenAboveMaxNorm) {
  // norm = sqrt(3² + 4² + 12²) = 13; factor = 6.5 / (13 + 1e-6).
  Params p;
  EXPECT_EQ(clip_grad_norm(p.all(), 6.5), 13.0);
  const double f = 6.5 / (13.0 + 1e-6);
  EXPECT_TRUE(all_close(p.a.grad(), {3 * f, 4 * f}, 1e-7));
  EXPECT_TRUE(all_close(p.b.grad(), {12 * f, 0.0}, 1e-15));
  EXPECT_EQ(p.a.grad().dtype(), DType::f32);
  EXPECT_FALSE(p.c.grad().defined());
  // The clipped norm is max_norm (up to the 1e-6 guard).
  EXPECT_NEAR(clip_grad_norm(p.all(), 100.0), 6.5, 1e-6);
}

TEST(ClipGradNorm, LeavesSmallGradientsAlone) {
  Params p;
  const void* buffer = p.a.grad().data_ptr();
  EXPECT_EQ(clip_grad_norm(p.all(), 13.5), 13.0);
  EXPECT_TRUE(all_close(p.a.grad(), {3.0, 4.0}, 0, 0));
  EXPECT_TRUE(all_close(p.b.grad(), {12.0, 0.0}, 0, 0));
  EXPECT_EQ(p.a.grad().data_ptr(), buffer);
}

TEST(ClipGradNorm, ScalesInTheGradientsOwnBuffers) {
  Params p;
  Tensor ga = p.a.grad();
  clip_grad_norm(p.all(), 1.0);
  EXPECT_TRUE(p.a.grad().same(ga));
  EXPECT_NEAR(std::hypot(ga.to_vector<double>()[0], ga.to_vector<double>()[1]), 5.0 / 13.0, 1e-6);
}

TEST(ClipGradNorm, NonFiniteNormIsReturnedAndGradientsKept) {
  for (double bad : {kInf, -kInf, kNaN}) {
    Params p;
    p.a.set_grad(tensor({bad, 1.0}));
    const double norm = clip_grad_norm(p.all(), 1.0);
    EXPECT_FALSE(std::isfinite(norm)) << bad;
    if (std::isnan(bad)) EXPECT_TRUE(std::isnan(norm));
    else EXPECT_EQ(norm, kInf);
    EXPECT_TRUE(all_close(p.b.grad(), {12.0, 0.0}, 0, 0));
    EXPECT_EQ(p.a.grad().to_vector<double>()[1], 1.0);
    expect_error<ValueError>([&] { clip_grad_norm(p.all(), 1.0, true); }, {"clip_grad_norm", "inf or NaN"});
  }
}

TEST(ClipGradNorm, NoGradientsAndErrors) {
  Tensor w = zeros({2}).requires_grad_();
  EXPECT_EQ(clip_grad_norm({w}, 1.0), 0.0);
  EXPECT_FALSE(w.grad().defined());
  expect_error<ValueError>([&] { clip_grad_norm({w}, 0.0); }, {"clip_grad_norm", "max_norm", "0"});
  expect_error<ValueError>([&] { clip_grad_norm({w}, -1.0); }, {"clip_grad_norm", "max_norm"});
  optim::SGD opt({w}, optim::SGDOptions(0.1));
  expect_error<ValueError>([&] { opt.set_clip_norm(-1.0); }, {"clip norm", ">= 0"});
}

TEST(ClipFactor, Values) {
  auto factor = [](double norm, double max) {
    return optim::clip_factor(full({}, norm, DType::f64), max).item<double>();
  };
  EXPECT_EQ(factor(13.0, 6.5), 6.5 / (13.0 + 1e-6));
  EXPECT_EQ(factor(1.0, 2.0), 1.0);
  EXPECT_EQ(factor(0.0, 2.0), 1.0);
  EXPECT_EQ(factor(kInf, 2.0), 1.0);
  EXPECT_EQ(factor(kNaN, 2.0), 1.0);
  // Traceable: symbolic in, symbolic out, no kernel.
  const uint64_t before = kernels_run();
  Tensor n = optim::global_grad_norm({symbolic({3, 2}), Tensor(), symbolic({4}, DType::f64)});
  Tensor f = optim::clip_factor(n, 1.0);
  EXPECT_EQ(kernels_run(), before);
  EXPECT_TRUE(f.is_symbolic());
  EXPECT_EQ(f.meta(), (TensorMeta{Shape{}, DType::f64, Device::cpu()}));
}

TEST(ClipNormInUpdate, EqualsClipGradNormThenStepBitwise) {
  for (double max_norm : {0.3, 100.0}) {
    Tensor w1 = test_randn({5, 4}, 1, DType::f32).requires_grad_();
    Tensor b1 = test_randn({4}, 2, DType::f64).requires_grad_();
    Tensor w2 = w1.detach().clone().requires_grad_(), b2 = b1.detach().clone().requires_grad_();
    optim::AdamW fused({w1, b1}, optim::AdamWOptions(0.01));
    optim::AdamW plain({w2, b2}, optim::AdamWOptions(0.01));
    fused.set_clip_norm(max_norm);
    EXPECT_EQ(fused.clip_norm(), max_norm);
    for (uint64_t s = 0; s < 3; ++s) {
      Tensor gw = test_randn({5, 4}, 10 + s, DType::f32), gb = test_randn({4}, 20 + s, DType::f64);
      w1.set_grad(gw.clone());
      b1.set_grad(gb.clone());
      w2.set_grad(gw.clone());
      b2.set_grad(gb.clone());
      fused.step();
      clip_grad_norm({w2, b2}, max_norm);
      plain.step();
      // The fused path leaves .grad alone.
      EXPECT_TRUE(all_close(w1.grad(), gw, 0, 0));
    }
    EXPECT_TRUE(all_close(w1, w2, 0, 0)) << max_norm;
    EXPECT_TRUE(all_close(b1, b2, 0, 0)) << max_norm;
  }
}

TEST(ClipNormInUpdate, ClippedStepOfSgdByHand) {
  // Plain SGD: p1 = p0 - lr·g·6.5/(13 + 1e-6) with the norm 13 of all gradients.
  Tensor a = tensor({1.0, 2.0}, DType::f64).requires_grad_(), b = tensor({-1.0}, DType::f64).requires_grad_();
  optim::SGD opt({a, b}, optim::SGDOptions(0.5));
  opt.set_clip_norm(6.5);
  a.set_grad(tensor({3.0, 4.0}, DType::f64));
  b.set_grad(tensor({12.0}, DType::f64));
  opt.step();
  const double f = 6.5 / (13.0 + 1e-6);
  EXPECT_TRUE(all_close(a, {1.0 - 0.5 * 3 * f, 2.0 - 0.5 * 4 * f}, 1e-15));
  EXPECT_TRUE(all_close(b, {-1.0 - 0.5 * 12 * f}, 1e-15));
}

}  // namespace
}  // namespace tessera
