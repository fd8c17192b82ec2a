// Adam (L2-coupled weight decay) and its op adam_update: the first steps against values
// computed by hand from fixed gradients (closed form without decay, the recurrence written out
// with decay), equality with AdamW when there is no decay, in-place runs, a traced update,
// parameter groups, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using optim::Adam;
using optim::AdamOptions;
using testing::all_close;
using testing::expect_error;
using testing::test_rand;
using testing::test_randn;
using Vec = std::vector<double>;

const Vec kP0 = {1.5, -2.0, 0.25, 3.0, -0.75};
const std::vector<Vec> kG = {
    {0.5, -1.0, 2.0, -0.25, 0.0}, {-0.3, 0.7, 1.1, 0.4, 0.05}, {0.2, 0.4, -0.6, -1.5, -0.1}};

Tensor scalar(double v) { return full({}, v, DType::f64); }

// p after steps 1..3 by the textbook recurrence, in f64:
//   g' = g + wd·p;  m = b1·m + (1-b1)·g';  v = b2·v + (1-b2)·g'²
//   p -= lr · (m / (1 - b1^k)) / (sqrt(v / (1 - b2^k)) + eps)
std::vector<Vec> expected_steps(double lr, double b1, double b2, double eps, double wd) {
  std::vector<Vec> out;
  Vec p = kP0, m(p.size(), 0.0), v(p.size(), 0.0);
  for (size_t k = 1; k <= kG.size(); ++k) {
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = kG[k - 1][i] + wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double mhat = m[i] / (1 - std::pow(b1, k)), vhat = v[i] / (1 - std::pow(b2, k));
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
    out.push_back(p);
  }
  return out;
}

void check_steps(const AdamOptions& o) {
  const std::vector<Vec> expected = expected_steps(o.lr(), o.beta1(), o.beta2(), o.eps(), o.weight_decay());
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 2e-6 : 1e-12;
    Tensor p = from_vector(kP0, {5}, dt).requires_grad_();
    Adam opt({p}, o);
    for (size_t k = 0; k < expected.size(); ++k) {
      p.set_grad(from_vector(kG[k], {5}, dt));
      opt.step();
      EXPECT_TRUE(all_close(p, expected[k], tol, tol)) << dtype_name(dt) << " step " << k + 1;
    }
  }
}

TEST(Adam, FirstStepClosedForm) {
  // Step 1: mhat = g', vhat = g'², so p1 = p0 - lr·g'/(|g'| + eps) with g' = g + wd·p0.
  const double lr = 0.05, wd = 0.2, eps = 1e-3;
  Vec p1(kP0.size());
  for (size_t i = 0; i < kP0.size(); ++i) {
    const double g = kG[0][i] + wd * kP0[i];
    p1[i] = kP0[i] - lr * g / (std::fabs(g) + eps);
  }
  Tensor p = from_vector(kP0, {5}, DType::f64).requires_grad_();
  Adam opt({p}, AdamOptions(lr).betas(0.8, 0.95).eps(eps).weight_decay(wd));
  p.set_grad(from_vector(kG[0], {5}, DType::f64));
  opt.step();
  EXPECT_TRUE(all_close(p, p1, 1e-14, 1e-14));
}

TEST(Adam, StepsWithoutWeightDecay) {
  check_steps(AdamOptions(0.05).betas(0.8, 0.95).eps(1e-3));
  check_steps(AdamOptions(0.01));
}

TEST(Adam, StepsWithL2WeightDecay) {
  check_steps(AdamOptions(0.05).betas(0.8, 0.95).eps(1e-3).weight_decay(0.2));
  check_steps(AdamOptions(0.1).betas(0.5, 0.9).weight_decay(1.0));
}

TEST(Adam, WithoutDecayEqualsAdamWBitwise) {
  Tensor a = test_randn({7, 3}, 1, DType::f32).requires_grad_(), b = a.detach().clone().requires_grad_();
  Adam adam({a}, AdamOptions(0.01).betas(0.7, 0.9));
  optim::AdamW adamw({b}, optim::AdamWOptions(0.01).betas(0.7, 0.9).weight_decay(0));
  for (uint64_t s = 0; s < 4; ++s) {
    Tensor g = test_randn({7, 3}, 10 + s, DType::f32);
    a.set_grad(g);
    b.set_grad(g);
    adam.step();
    adamw.step();
  }
  EXPECT_TRUE(all_close(a, b, 0, 0));
}

TEST(Adam, DecayIsCoupledUnlikeAdamW) {
  // A zero gradient with decay: Adam's step is lr·sign(p) (the decay passes the adaptive
  // denominator), AdamW's is lr·wd·p.
  Tensor a = tensor({2.0, -0.5}, DType::f64).requires_grad_(), b = tensor({2.0, -0.5}, DType::f64).requires_grad_();
  Adam adam({a}, AdamOptions(0.1).weight_decay(0.5));
  optim::AdamW adamw({b}, optim::AdamWOptions(0.1).weight_decay(0.5));
  a.set_grad(zeros({2}, DType::f64));
  b.set_grad(zeros({2}, DType::f64));
  adam.step();
  adamw.step();
  EXPECT_TRUE(all_close(a, {1.9, -0.4}, 1e-7));  // up to eps = 1e-8 in |g'| + eps
  EXPECT_TRUE(all_close(b, {2.0 * 0.95, -0.5 * 0.95}, 1e-14));
}

TEST(AdamUpdate, Values) {
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 2e-6 : 1e-14;
    Vec pv = {1.0, -2.0, 0.5}, gv = {0.25, 1.0, -3.0}, mv = {0.1, -0.2, 0.3}, vv = {0.5, 0.01, 2.0};
    const double lr = 0.01, b1 = 0.8, b2 = 0.9, eps = 1e-4, wd = 0.5, t = 3;
    std::vector<Tensor> out =
        adam_update(from_vector(pv, {3}, dt), from_vector(gv, {3}, dt), from_vector(mv, {3}, dt),
                    from_vector(vv, {3}, dt), scalar(lr), scalar(t), AdamDecay::coupled, b1, b2, eps, wd);
    ASSERT_EQ(out.size(), 3u);
    Vec pe(3), me(3), ve(3);
    for (int i = 0; i < 3; ++i) {
      const double g = gv[i] + wd * pv[i];
      me[i] = b1 * mv[i] + (1 - b1) * g;
      ve[i] = b2 * vv[i] + (1 - b2) * g * g;
      pe[i] = pv[i] - lr * (me[i] / (1 - std::pow(b1, t))) / (std::sqrt(ve[i] / (1 - std::pow(b2, t))) + eps);
    }
    EXPECT_TRUE(all_close(out[0], pe, tol, tol));
    EXPECT_TRUE(all_close(out[1], me, tol, tol));
    EXPECT_TRUE(all_close(out[2], ve, tol, tol));
  }
}

TEST(AdamUpdate, InPlaceMatchesFreshOutputs) {
  for (int64_t n : {int64_t{7}, int64_t{40001}}) {
    for (DType dt : {DType::f32, DType::f64}) {
      std::vector<Tensor> in = {test_randn({n}, 1, dt), test_randn({n}, 2, dt), test_randn({n}, 3, dt),
                                test_rand({n}, 0.0, 2.0, 4, dt), scalar(0.01), scalar(7)};
      const op::AdamUpdate::Attrs a{0.9, 0.999, 1e-8, AdamDecay::coupled, 0.1};
      std::vector<Tensor> fresh = call<op::AdamUpdate>(a, in);
      std::vector<Tensor> own;
      for (const Tensor& t : in) own.push_back(t.clone());
      call_out<op::AdamUpdate>(a, own, {own[0], own[2], own[3]});
      EXPECT_TRUE(all_close(own[0], fresh[0], 0, 0));
      EXPECT_TRUE(all_close(own[2], fresh[1], 0, 0));
      EXPECT_TRUE(all_close(own[3], fresh[2], 0, 0));
    }
  }
}

TEST(Adam, TracedUpdateIsSymbolic) {
  Tensor p = zeros({4}, DType::f64).requires_grad_();
  Adam opt({p});
  const uint64_t before = kernels_run();
  std::vector<optim::Write> w =
      opt.update(0, symbolic({4}, DType::f64), symbolic({}, DType::f64), symbolic({}, DType::f64));
  EXPECT_EQ(kernels_run(), before);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_TRUE(w[0].target.same(p));
  EXPECT_TRUE(w[1].target.same(opt.state()[0]));
  EXPECT_TRUE(w[2].target.same(opt.state()[1]));
  for (const optim::Write& x : w) EXPECT_TRUE(x.value.is_symbolic() && x.value.meta() == x.target.meta());
  // Checkpoint naming: state()[k·n + i] is state_names()[k] of parameter i.
  EXPECT_EQ(opt.name(), "adam");
  EXPECT_EQ(opt.state_names(), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  EXPECT_EQ(opt.hyperparameters().size(), 5u);
}

TEST(Adam, Errors) {
  Tensor p = zeros({3}).requires_grad_();
  expect_error<ValueError>([&] { Adam({p}, AdamOptions(-1e-3)); }, {"Adam", "lr"});
  expect_error<ValueError>([&] { Adam({p}, AdamOptions().betas(1.0, 0.9)); }, {"Adam", "beta1"});
  expect_error<ValueError>([&] { Adam({p}, AdamOptions().betas(0.9, 1.5)); }, {"Adam", "beta2"});
  expect_error<ValueError>([&] { Adam({p}, AdamOptions().eps(-1)); }, {"Adam", "eps"});
  expect_error<ValueError>([&] { Adam({p}, AdamOptions().weight_decay(-0.1)); }, {"Adam", "weight_decay"});
  Tensor lr = scalar(0.1), t = scalar(1);
  const AdamDecay l2 = AdamDecay::coupled;
  expect_error<ShapeError>([&] { adam_update(p, zeros({4}), p, p, lr, t, l2); }, {"adam_update", "f32[3]", "f32[4]"});
  expect_error<DTypeError>([&] { adam_update(p, p, p, p, full({}, 0.1), t, l2); }, {"adam_update", "lr", "f32[]"});
  expect_error<ValueError>([&] { adam_update(p, p, p, p, lr, scalar(0), l2); }, {"adam_update", "step"});
  expect_error<ValueError>([&] { adam_update(p, p, p, p, lr, t, l2, 0.9, 0.999, 1e-8, -1.0); },
                           {"adam_update", "weight_decay"});
}

}  // namespace
}  // namespace tessera
