// The fused update ops sgd_update and adam_update (decoupled decay, AdamW) called directly: values against closed
// forms, the first-step and no-momentum rules, in-place runs (outputs aliasing inputs, also
// on the OpenMP path) equal to fresh outputs, symbolic runs, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
using testing::test_rand;
using testing::test_randn;

Tensor scalar(double v) { return full({}, v, DType::f64); }

TEST(SgdUpdate, Values) {
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 1e-6 : 1e-14;
    Tensor p = tensor({1.0, -2.0, 0.5}, dt), g = tensor({0.25, 1.0, -3.0}, dt),
           buf = tensor({2.0, -1.0, 0.0}, dt);
    const double lr = 0.1, mu = 0.9, damp = 0.2, wd = 0.05;
    // t = 3: g' = g + wd·p; buf' = mu·buf + (1 - damp)·g'; p' = p - lr·buf'.
    std::vector<double> gd = {0.25 + wd * 1.0, 1.0 + wd * -2.0, -3.0 + wd * 0.5};
    std::vector<double> b = {mu * 2 + (1 - damp) * gd[0], mu * -1 + (1 - damp) * gd[1], (1 - damp) * gd[2]};
    std::vector<Tensor> out = sgd_update(p, g, buf, scalar(lr), scalar(3), mu, damp, wd);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_TRUE(all_close(out[1], b, tol, tol));
    EXPECT_TRUE(all_close(out[0], {1.0 - lr * b[0], -2.0 - lr * b[1], 0.5 - lr * b[2]}, tol, tol));
    // Nesterov (no dampening), t = 2: d = g' + mu·buf'.
    out = sgd_update(p, g, buf, scalar(lr), scalar(2), mu, 0.0, wd, true);
    for (int i = 0; i < 3; ++i) b[i] = mu * std::vector<double>{2, -1, 0}[i] + gd[i];
    EXPECT_TRUE(all_close(out[1], b, tol, tol));
    EXPECT_TRUE(all_close(
        out[0],
        {1.0 - lr * (gd[0] + mu * b[0]), -2.0 - lr * (gd[1] + mu * b[1]), 0.5 - lr * (gd[2] + mu * b[2])},
        tol, tol));
    // The inputs are untouched.
    EXPECT_TRUE(all_close(p, {1.0, -2.0, 0.5}));
    EXPECT_TRUE(all_close(buf, {2.0, -1.0, 0.0}));
  }
}

TEST(SgdUpdate, FirstStepAndNoMomentum) {
  Tensor p = tensor({1.0, 2.0}, DType::f64), g = tensor({0.5, -1.5}, DType::f64),
         buf = tensor({7.0, -3.0}, DType::f64);
  // t = 1: the old buffer is ignored and not dampened, buf' = g.
  std::vector<Tensor> out = sgd_update(p, g, buf, scalar(0.5), scalar(1), 0.9, 0.5);
  EXPECT_TRUE(all_close(out[1], {0.5, -1.5}));
  EXPECT_TRUE(all_close(out[0], {0.75, 2.75}));
  // momentum 0: buf' is a copy of buf, the step is plain.
  out = sgd_update(p, g, buf, scalar(0.5), scalar(4));
  EXPECT_TRUE(all_close(out[1], {7.0, -3.0}));
  EXPECT_FALSE(out[1].same(buf));
  EXPECT_TRUE(all_close(out[0], {0.75, 2.75}));
}

TEST(AdamUpdateDecoupled, Values) {
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 2e-6 : 1e-14;
    std::vector<double> pv = {1.0, -2.0, 0.5}, gv = {0.25, 1.0, -3.0}, mv = {0.1, -0.2, 0.3},
                        vv = {0.5, 0.01, 2.0};
    const double lr = 0.01, b1 = 0.8, b2 = 0.9, eps = 1e-4, wd = 0.5, t = 3;
    std::vector<Tensor> out =
        adam_update(from_vector(pv, {3}, dt), from_vector(gv, {3}, dt), from_vector(mv, {3}, dt),
                    from_vector(vv, {3}, dt), scalar(lr), scalar(t), AdamDecay::decoupled, b1, b2, eps, wd);
    ASSERT_EQ(out.size(), 3u);
    std::vector<double> pe(3), me(3), ve(3);
    for (int i = 0; i < 3; ++i) {
      me[i] = b1 * mv[i] + (1 - b1) * gv[i];
      ve[i] = b2 * vv[i] + (1 - b2) * gv[i] * gv[i];
      const double mhat = me[i] / (1 - std::pow(b1, t)), vhat = ve[i] / (1 - std::pow(b2, t));
      pe[i] = pv[i] - lr * (mhat / (std::sqrt(vhat) + eps) + wd * pv[i]);
    }
    EXPECT_TRUE(all_close(out[0], pe, tol, tol));
    EXPECT_TRUE(all_close(out[1], me, tol, tol));
    EXPECT_TRUE(all_close(out[2], ve, tol, tol));
  }
}

// Runs `op` into fresh outputs and into outputs that alias its state inputs; both must agree.
// `state` lists which inputs the outputs alias (p, then the state tensors).
template <class Op>
void check_in_place(const typename Op::Attrs& attrs, const std::vector<Tensor>& inputs,
                    const std::vector<int>& state) {
  std::vector<Tensor> fresh = call<Op>(attrs, inputs);
  std::vector<Tensor> in, out;
  for (const Tensor& t : inputs) in.push_back(t.clone());
  for (int k : state) out.push_back(in[k]);
  call_out<Op>(attrs, in, out);
  ASSERT_EQ(fresh.size(), out.size());
  for (size_t k = 0; k < out.size(); ++k) {
    EXPECT_TRUE(all_close(out[k], fresh[k], 0, 0)) << Op::kName << " output " << k;
    EXPECT_TRUE(all_close(in[state[k]], fresh[k], 0, 0)) << Op::kName << " aliased input " << state[k];
  }
}

TEST(SgdUpdate, InPlaceMatchesFreshOutputs) {
  // 7 elements, and 40001 (> kParallelGrain, the OpenMP path).
  for (int64_t n : {int64_t{7}, int64_t{40001}}) {
    for (DType dt : {DType::f32, DType::f64}) {
      std::vector<Tensor> in = {test_randn({n}, 1, dt), test_randn({n}, 2, dt), test_randn({n}, 3, dt),
                                scalar(0.05), scalar(5)};
      check_in_place<op::SgdUpdate>({0.9, 0.1, 0.01, false}, in, {0, 2});
      check_in_place<op::SgdUpdate>({0.9, 0.0, 0.01, true}, in, {0, 2});
      check_in_place<op::SgdUpdate>({0.0, 0.0, 0.0, false}, in, {0, 2});
    }
  }
}

TEST(AdamUpdateDecoupled, InPlaceMatchesFreshOutputs) {
  for (int64_t n : {int64_t{7}, int64_t{40001}}) {
    for (DType dt : {DType::f32, DType::f64}) {
      std::vector<Tensor> in = {test_randn({n}, 1, dt), test_randn({n}, 2, dt),
                                test_randn({n}, 3, dt), test_rand({n}, 0.0, 2.0, 4, dt),
                                scalar(0.01),           scalar(7)};
      check_in_place<op::AdamUpdate>({0.9, 0.999, 1e-8, AdamDecay::decoupled, 0.01}, in, {0, 2, 3});
    }
  }
}

TEST(UpdateOps, Symbolic) {
  Tensor p = symbolic({3, 5}), lr = symbolic({}, DType::f64), t = symbolic({}, DType::f64);
  std::vector<Tensor> s = sgd_update(p, p, p, lr, t, 0.9);
  ASSERT_EQ(s.size(), 2u);
  for (const Tensor& x : s) EXPECT_EQ(x.meta(), p.meta());
  std::vector<Tensor> a = adam_update(p, p, p, p, lr, t, AdamDecay::decoupled, 0.9, 0.999, 1e-8, 0.01);
  ASSERT_EQ(a.size(), 3u);
  for (const Tensor& x : a) EXPECT_TRUE(x.is_symbolic() && x.meta() == p.meta());
}

TEST(UpdateOps, Errors) {
  Tensor p = zeros({2, 3}), lr = scalar(0.1), t = scalar(1);
  expect_error<ShapeError>(
      [&] {
        sgd_update(p, zeros({3, 2}), p, lr, t);
      },
      {"sgd_update", "f32[2, 3]", "f32[3, 2]"});
  expect_error<ShapeError>([&] { sgd_update(p, p, zeros({6}), lr, t); },
                           {"sgd_update", "momentum_buffer", "f32[6]", "f32[2, 3]"});
  expect_error<DTypeError>(
      [&] {
        sgd_update(p, zeros({2, 3}, DType::f64), p, lr, t);
      },
      {"sgd_update", "f32[2, 3]", "f64[2, 3]"});
  expect_error<DTypeError>(
      [&] { sgd_update(zeros({2}, DType::i32), zeros({2}, DType::i32), zeros({2}, DType::i32), lr, t); },
      {"sgd_update", "floating", "i32[2]"});
  expect_error<DTypeError>([&] { sgd_update(p, p, p, full({}, 0.1), t); }, {"sgd_update", "lr", "f32[]"});
  expect_error<ShapeError>([&] { sgd_update(p, p, p, lr, full({1}, 1.0, DType::f64)); },
                           {"sgd_update", "step", "f64[1]"});
  expect_error<ValueError>([&] { sgd_update(p, p, p, lr, t, -0.5); }, {"sgd_update", "momentum"});
  expect_error<ValueError>([&] { sgd_update(p, p, p, lr, t, 0.9, 0.1, 0.0, true); },
                           {"sgd_update", "nesterov"});
  expect_error<ValueError>([&] { sgd_update(p, p, p, lr, scalar(0)); }, {"sgd_update", "step", ">= 1"});
  expect_error<ShapeError>(
      [&] {
        adam_update(p, p, p, zeros({2, 4}), lr, t, AdamDecay::decoupled, 0.9, 0.999, 1e-8, 0.01);
      },
      {"adam_update (adamw)", "exp_avg_sq", "f32[2, 4]", "f32[2, 3]"});
  expect_error<ValueError>([&] { adam_update(p, p, p, p, lr, t, AdamDecay::decoupled, 1.0); },
                           {"adam_update (adamw)", "beta1"});
  expect_error<ValueError>([&] { adam_update(p, p, p, p, lr, t, AdamDecay::decoupled, 0.9, 0.999, -1.0); },
                           {"adam_update (adamw)", "eps"});
  expect_error<ValueError>([&] { adam_update(p, p, p, p, lr, scalar(0.5), AdamDecay::decoupled); },
                           {"adam_update (adamw)", "step"});
}

}  // namespace
}  // namespace tessera
