// Learning-rate schedules at their boundary steps: 0, 1, the end of warmup, the step after,
// the middle of the decay, the total and beyond; apply() on an optimizer; errors.
#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using optim::ConstantLR;
using optim::WarmupCosine;
using optim::WarmupLinear;
using testing::expect_error;

constexpr double kPi = 3.14159265358979323846;

TEST(Schedule, Constant) {
  ConstantLR c(3e-4);
  for (int64_t t : {0, 1, 7, 1000000}) EXPECT_EQ(c.lr_at(t), 3e-4);
}

TEST(Schedule, ConstantAfterWarmup) {
  ConstantLR c(1e-3, 200);
  EXPECT_EQ(c.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(c.lr_at(1), 5e-6);
  EXPECT_DOUBLE_EQ(c.lr_at(100), 5e-4);
  EXPECT_DOUBLE_EQ(c.lr_at(200), 1e-3);  // end of warmup: the lr
  for (int64_t t : {201, 5000, 1000000}) EXPECT_EQ(c.lr_at(t), 1e-3);
}

TEST(Schedule, WarmupLinearBoundaries) {
  // peak 1e-3, warmup 10, total 110, floor 1e-4: the decay covers 100 steps.
  WarmupLinear s(1e-3, 10, 110, 1e-4);
  EXPECT_EQ(s.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(1), 1e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 5e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1e-3);                          // end of warmup: the peak
  EXPECT_DOUBLE_EQ(s.lr_at(11), 1e-4 + 9e-4 * (1.0 - 0.01));    // first decay step
  EXPECT_DOUBLE_EQ(s.lr_at(60), 1e-4 + 9e-4 * 0.5);             // halfway
  EXPECT_DOUBLE_EQ(s.lr_at(109), 1e-4 + 9e-4 * 0.01);
  EXPECT_EQ(s.lr_at(110), 1e-4);                                // total: the floor
  EXPECT_EQ(s.lr_at(111), 1e-4);
  EXPECT_EQ(s.lr_at(100000), 1e-4);
}

TEST(Schedule, WarmupCosineBoundaries) {
  WarmupCosine s(2.0, 4, 20, 0.5);  // decay over 16 steps
  EXPECT_EQ(s.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.5);
  EXPECT_DOUBLE_EQ(s.lr_at(4), 2.0);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 0.5 + 1.5 * 0.5 * (1 + std::cos(kPi / 16)));
  EXPECT_DOUBLE_EQ(s.lr_at(12), 0.5 + 1.5 * 0.5);  // cos(π/2) = 0
  EXPECT_DOUBLE_EQ(s.lr_at(19), 0.5 + 1.5 * 0.5 * (1 + std::cos(kPi * 15 / 16)));
  EXPECT_EQ(s.lr_at(20), 0.5);
  EXPECT_EQ(s.lr_at(21), 0.5);
  // Monotone after warmup.
  for (int64_t t = 4; t < 25; ++t) EXPECT_GE(s.lr_at(t), s.lr_at(t + 1)) << t;
}

TEST(Schedule, NoWarmupAndNoDecay) {
  WarmupLinear no_warmup(1.0, 0, 4);  // floor 0
  EXPECT_EQ(no_warmup.lr_at(0), 1.0);
  EXPECT_EQ(no_warmup.lr_at(1), 0.75);
  EXPECT_EQ(no_warmup.lr_at(4), 0.0);
  WarmupCosine warmup_only(1.0, 4, 4, 0.25);
  EXPECT_EQ(warmup_only.lr_at(2), 0.5);
  EXPECT_EQ(warmup_only.lr_at(4), 1.0);
  EXPECT_EQ(warmup_only.lr_at(5), 0.25);
}

TEST(Schedule, ApplySetsTheNextStepsRate) {
  Tensor p = zeros({2}).requires_grad_();
  optim::SGD opt({p}, optim::SGDOptions(123.0));
  WarmupLinear s(1.0, 4, 8);
  s.apply(opt);
  EXPECT_EQ(opt.lr(), 0.25);  // step 1
  p.set_grad(ones({2}));
  opt.step();
  opt.step();
  s.apply(opt);
  EXPECT_EQ(opt.lr(), 0.75);  // step 3
}

TEST(Schedule, Errors) {
  expect_error<ValueError>([] { ConstantLR(-1.0); }, {"ConstantLR", "lr"});
  expect_error<ValueError>([] { ConstantLR(1.0, -1); }, {"ConstantLR", "warmup_steps"});
  expect_error<ValueError>([] { WarmupLinear(1.0, 10, 5); }, {"warmup_steps", "total_steps"});
  expect_error<ValueError>([] { WarmupCosine(1.0, -1, 5); }, {"warmup_steps"});
  expect_error<ValueError>([] { WarmupCosine(1.0, 1, 5, 2.0); }, {"floor", "peak"});
  expect_error<ValueError>([] { WarmupLinear(1.0, 1, 5).lr_at(-1); }, {"step", ">= 0"});
}

}  // namespace
}  // namespace tessera
