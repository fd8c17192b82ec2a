// The dynamic loss scaler: its transitions (x2 after 2000 clean steps, x0.5 on inf/NaN with
// the clean count reset), unscaling in place, skipped steps that leave parameters, state and
// step count untouched, a stepped update equal to a plain step on the true gradients, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gradcheck.h"
#include "kernels/ops.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using optim::LossScaler;
using optim::LossScalerOptions;
using testing::all_close;
using testing::expect_error;

TEST(LossScaler, Defaults) {
  LossScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.clean_steps(), 0);
  EXPECT_EQ(s.options().growth_interval(), 2000);
  EXPECT_EQ(s.options().growth_factor(), 2.0);
  EXPECT_EQ(s.options().backoff_factor(), 0.5);
}

TEST(LossScaler, GrowsAfter2000CleanSteps) {
  LossScaler s;
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.clean_steps(), 1999);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072.0);
  EXPECT_EQ(s.clean_steps(), 0);
  for (int i = 0; i < 2000; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 262144.0);
}

TEST(LossScaler, BacksOffOnOverflowAndRestartsTheCount) {
  LossScaler s;
  for (int i = 0; i < 1500; ++i) s.update(false);
  s.update(true);
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.clean_steps(), 0);
  s.update(true);
  EXPECT_EQ(s.scale(), 16384.0);
  // 1999 clean steps after the overflow are not enough; the 2000th doubles.
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 16384.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 32768.0);
}

TEST(LossScaler, CustomOptions) {
  LossScaler s(LossScalerOptions().init_scale(8.0).growth_interval(3).growth_factor(4.0).backoff_factor(0.25));
  s.update(false);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 32.0);
  s.update(true);
  EXPECT_EQ(s.scale(), 8.0);
  s.set_state(1024.0, 2);
  s.update(false);
  EXPECT_EQ(s.scale(), 4096.0);
}

TEST(LossScaler, ScaleLossAndUnscale) {
  LossScaler s(LossScalerOptions().init_scale(1024.0));
  Tensor w = tensor({0.5, -1.0, 2.0}).requires_grad_();
  Tensor loss = sum(mul(w, w));
  s.scale_loss(loss).backward();
  EXPECT_TRUE(all_close(w.grad(), {1024.0, -2048.0, 4096.0}));  // 1024·2w
  Tensor g = w.grad();
  EXPECT_FALSE(s.unscale({w}));
  EXPECT_TRUE(w.grad().same(g));  // in place
  EXPECT_TRUE(all_close(w.grad(), {1.0, -2.0, 4.0}, 0, 0));
}

TEST(LossScaler, SkipsTheStepOnInfOrNaN) {
  for (double bad : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    Tensor a = tensor({1.0, 2.0}).requires_grad_(), b = tensor({3.0}, DType::f64).requires_grad_();
    Tensor c = tensor({4.0}).requires_grad_();  // no gradient
    optim::AdamW opt({a, b, c}, optim::AdamWOptions(0.1));
    LossScaler s;
    a.set_grad(tensor({1.0, 1.0}));
    b.set_grad(tensor({bad}, DType::f64));
    EXPECT_FALSE(s.step(opt));
    EXPECT_EQ(s.scale(), 32768.0);
    EXPECT_EQ(opt.step_count(), 1);  // skipped, but counted (as a compiled step counts it)
    EXPECT_TRUE(all_close(a, {1.0, 2.0}, 0, 0));
    EXPECT_TRUE(all_close(b, {3.0}, 0, 0));
    for (const Tensor& st : opt.state()) EXPECT_TRUE(all_close(st, std::vector<double>(st.numel(), 0.0), 0, 0));
    // The next, clean step goes through and counts.
    a.set_grad(tensor({1.0, 1.0}));
    b.set_grad(tensor({1.0}, DType::f64));
    EXPECT_TRUE(s.step(opt));
    EXPECT_EQ(opt.step_count(), 2);
    EXPECT_EQ(s.clean_steps(), 1);
  }
}

TEST(LossScaler, SteppedUpdateEqualsAPlainStep) {
  // Gradients scaled by a power of two and unscaled are exact: the step equals the plain one.
  Tensor a = tensor({1.0, -2.0, 0.5}).requires_grad_(), b = a.detach().clone().requires_grad_();
  optim::SGD sa({a}, optim::SGDOptions(0.1).momentum(0.9)), sb({b}, optim::SGDOptions(0.1).momentum(0.9));
  LossScaler s;
  for (int i = 0; i < 3; ++i) {
    Tensor g = tensor({0.3, -0.7, 1.1 * (i + 1)});
    a.set_grad(mul(g, s.scale()));
    b.set_grad(g);
    EXPECT_TRUE(s.step(sa));
    sb.step();
  }
  EXPECT_TRUE(all_close(a, b, 0, 0));
}

TEST(LossScaler, Errors) {
  expect_error<ValueError>([] { LossScaler(LossScalerOptions().init_scale(0)); }, {"LossScaler", "init_scale"});
  expect_error<ValueError>([] { LossScaler(LossScalerOptions().growth_factor(1.0)); },
                           {"LossScaler", "growth_factor"});
  expect_error<ValueError>([] { LossScaler(LossScalerOptions().backoff_factor(1.0)); },
                           {"LossScaler", "backoff_factor"});
  expect_error<ValueError>([] { LossScaler(LossScalerOptions().growth_interval(0)); },
                           {"LossScaler", "growth_interval"});
  LossScaler s;
  expect_error<ValueError>([&] { s.set_state(-1.0, 0); }, {"LossScaler", "scale"});
}

}  // namespace
}  // namespace tessera
