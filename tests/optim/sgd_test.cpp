// SGD: the first steps against closed-form values (plain, momentum, dampening, nesterov,
// weight decay; f32 and f64), a small quadratic minimized with backward/step/zero_grad,
// parameters without gradient, a traced (symbolic) update, and option/parameter errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using optim::SGD;
using optim::SGDOptions;
using testing::all_close;
using testing::expect_error;
using Vec = std::vector<double>;

// Fixed, hand-chosen parameter and gradients for steps 1..3.
const Vec kP0 = {1.5, -2.0, 0.25, 3.0};
const std::vector<Vec> kG = {{0.5, -1.0, 2.0, -0.25}, {-0.3, 0.7, 1.1, 0.4}, {0.2, 0.4, -0.6, -1.5}};

// a·x + b·y elementwise.
Vec axpby(double a, const Vec& x, double b, const Vec& y) {
  Vec r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = a * x[i] + b * y[i];
  return r;
}

// Runs three eager steps with kG as gradients; checks p after each step against expected[k].
void check_steps(const SGDOptions& opts, const std::vector<Vec>& expected) {
  for (DType dt : {DType::f32, DType::f64}) {
    const double rtol = dt == DType::f32 ? 1e-6 : 1e-13, atol = dt == DType::f32 ? 1e-6 : 1e-13;
    Tensor p = from_vector(kP0, {4}, dt).requires_grad_();
    SGD opt({p}, opts);
    for (size_t k = 0; k < expected.size(); ++k) {
      p.set_grad(from_vector(kG[k], {4}, dt));
      opt.step();
      EXPECT_EQ(opt.step_count(), static_cast<int64_t>(k + 1));
      EXPECT_TRUE(all_close(p, expected[k], rtol, atol)) << dtype_name(dt) << " step " << k + 1;
    }
  }
}

TEST(SGD, PlainSteps) {
  const double lr = 0.1;
  // p_k = p0 - lr·(g_1 + ... + g_k)
  Vec s1 = kG[0], s2 = axpby(1, s1, 1, kG[1]), s3 = axpby(1, s2, 1, kG[2]);
  check_steps(SGDOptions(lr), {axpby(1, kP0, -lr, s1), axpby(1, kP0, -lr, s2), axpby(1, kP0, -lr, s3)});
}

TEST(SGD, MomentumAndDampeningSteps) {
  const double lr = 0.05, mu = 0.9;
  for (double damp : {0.0, 0.25}) {
    // buf_1 = g_1 (no dampening on the first step); buf_k = mu·buf_{k-1} + (1 - damp)·g_k
    //   buf_2 = mu·g_1 + (1-damp)·g_2;  buf_3 = mu²·g_1 + mu(1-damp)·g_2 + (1-damp)·g_3
    // p_k = p0 - lr·(buf_1 + ... + buf_k)
    Vec b1 = kG[0], b2 = axpby(mu, kG[0], 1 - damp, kG[1]);
    Vec b3 = axpby(1, axpby(mu * mu, kG[0], mu * (1 - damp), kG[1]), 1 - damp, kG[2]);
    Vec p1 = axpby(1, kP0, -lr, b1), p2 = axpby(1, p1, -lr, b2), p3 = axpby(1, p2, -lr, b3);
    check_steps(SGDOptions(lr).momentum(mu).dampening(damp), {p1, p2, p3});
  }
}

TEST(SGD, NesterovSteps) {
  const double lr = 0.05, mu = 0.8;
  // buf as with momentum (no dampening); the step direction is g_k + mu·buf_k.
  Vec b1 = kG[0], b2 = axpby(mu, kG[0], 1, kG[1]), b3 = axpby(mu * mu, kG[0], 1, axpby(mu, kG[1], 1, kG[2]));
  Vec p1 = axpby(1, kP0, -lr, axpby(1, kG[0], mu, b1));
  Vec p2 = axpby(1, p1, -lr, axpby(1, kG[1], mu, b2));
  Vec p3 = axpby(1, p2, -lr, axpby(1, kG[2], mu, b3));
  check_steps(SGDOptions(lr).momentum(mu).nesterov(true), {p1, p2, p3});
}

TEST(SGD, WeightDecaySteps) {
  const double lr = 0.1, wd = 0.3, mu = 0.5;
  // Without momentum: p_k = p_{k-1} - lr·(g_k + wd·p_{k-1}) = (1 - lr·wd)·p_{k-1} - lr·g_k.
  {
    Vec p1 = axpby(1 - lr * wd, kP0, -lr, kG[0]);
    Vec p2 = axpby(1 - lr * wd, p1, -lr, kG[1]);
    Vec p3 = axpby(1 - lr * wd, p2, -lr, kG[2]);
    check_steps(SGDOptions(lr).weight_decay(wd), {p1, p2, p3});
  }
  // With momentum the decayed gradient g'_k = g_k + wd·p_{k-1} feeds the buffer.
  {
    Vec d1 = axpby(1, kG[0], wd, kP0), p1 = axpby(1, kP0, -lr, d1);
    Vec d2 = axpby(mu, d1, 1, axpby(1, kG[1], wd, p1)), p2 = axpby(1, p1, -lr, d2);
    Vec d3 = axpby(mu, d2, 1, axpby(1, kG[2], wd, p2)), p3 = axpby(1, p2, -lr, d3);
    check_steps(SGDOptions(lr).momentum(mu).weight_decay(wd), {p1, p2, p3});
  }
}

TEST(SGD, MinimizesQuadratic) {
  // L(w) = sum((w - c)²): dL/dw = 2(w - c), so plain SGD contracts w - c by (1 - 2·lr) per step.
  for (const SGDOptions& opts : {SGDOptions(0.1), SGDOptions(0.05).momentum(0.9).nesterov(true)}) {
    Tensor w = tensor({3.0, -1.0, 0.5, 2.0, -4.0}, DType::f64).requires_grad_();
    Tensor c = tensor({1.0, 2.0, -0.5, 0.0, 1.5}, DType::f64);
    SGD opt({w}, opts);
    double first_loss = 0, loss_value = 0;
    for (int it = 0; it < 200; ++it) {
      Tensor d = sub(w, c);
      Tensor loss = sum(mul(d, d));
      loss_value = loss.item<double>();
      if (it == 0) first_loss = loss_value;
      loss.backward();
      opt.step();
      opt.zero_grad();
      EXPECT_FALSE(w.grad().defined());
    }
    EXPECT_GT(first_loss, 10.0);
    EXPECT_LT(loss_value, 1e-12);
    EXPECT_TRUE(all_close(w, c, 0, 1e-6));
    EXPECT_TRUE(w.is_leaf());
    EXPECT_TRUE(w.requires_grad());
  }
}

TEST(SGD, SkipsParametersWithoutGradient) {
  Tensor a = tensor({1.0, 2.0}).requires_grad_(), b = tensor({3.0, 4.0, 5.0}).requires_grad_();
  SGD opt({a, b}, SGDOptions(0.5).momentum(0.9));
  b.set_grad(tensor({1.0, -2.0, 4.0}));
  opt.step();
  EXPECT_TRUE(all_close(a, {1.0, 2.0}));
  EXPECT_TRUE(all_close(b, {2.5, 5.0, 3.0}));
  std::vector<Tensor> st = opt.state();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_TRUE(all_close(st[0], {0.0, 0.0}));
  EXPECT_TRUE(all_close(st[1], {1.0, -2.0, 4.0}));
  EXPECT_EQ(opt.step_count(), 1);
}

TEST(SGD, TracedUpdateIsSymbolic) {
  // A traced step calls update() with symbolic gradient, lr and step: no kernel runs, and the
  // writes name the parameter and its buffer as targets with matching metas.
  Tensor p = zeros({2, 3}).requires_grad_();
  SGD opt({p}, SGDOptions(0.1).momentum(0.9));
  const uint64_t before = kernels_run();
  std::vector<optim::Write> w =
      opt.update(0, symbolic({2, 3}), symbolic({}, DType::f64), symbolic({}, DType::f64));
  EXPECT_EQ(kernels_run(), before);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_TRUE(w[0].target.same(p));
  EXPECT_TRUE(w[1].target.same(opt.state()[0]));
  for (const optim::Write& x : w) {
    EXPECT_TRUE(x.value.is_symbolic());
    EXPECT_EQ(x.value.meta(), x.target.meta());
  }
  // Without momentum only the parameter is written.
  SGD plain({p}, SGDOptions(0.1));
  EXPECT_EQ(plain.update(0, symbolic({2, 3}), symbolic({}, DType::f64), symbolic({}, DType::f64)).size(), 1u);
}

TEST(SGD, Errors) {
  Tensor p = zeros({3}).requires_grad_();
  expect_error<ValueError>([&] { SGD({p}, SGDOptions(-0.1)); }, {"SGD", "lr", "-0.1"});
  expect_error<ValueError>([&] { SGD({p}, SGDOptions(0.1).momentum(-0.5)); }, {"SGD", "momentum"});
  expect_error<ValueError>([&] { SGD({p}, SGDOptions(0.1).weight_decay(-1)); }, {"SGD", "weight_decay"});
  expect_error<ValueError>([&] { SGD({p}, SGDOptions(0.1).nesterov(true)); },
                           {"SGD", "nesterov", "momentum"});
  expect_error<ValueError>([&] { SGD({p}, SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true)); },
                           {"SGD", "nesterov", "dampening"});
  expect_error<DTypeError>([&] { SGD({zeros({3}, DType::i32)}, SGDOptions(0.1)); }, {"optimizer", "i32[3]"});
  Tensor non_leaf = mul(p, 2.0);
  expect_error<ValueError>([&] { SGD({non_leaf}, SGDOptions(0.1)); }, {"optimizer", "not a leaf"});
  // A gradient that does not fit its parameter: the update op names both.
  SGD opt({p}, SGDOptions(0.1));
  expect_error<ShapeError>(
      [&] { opt.update(0, zeros({4}), full({}, 0.1, DType::f64), full({}, 1.0, DType::f64)); },
      {"sgd_update", "f32[3]", "f32[4]"});
}

}  // namespace
}  // namespace tessera
