// AdamW: the first three steps against closed-form values (with and without weight decay,
// f32 and f64), options, a small quadratic minimized with backward/step/zero_grad,
// parameters without gradient, a traced (symbolic) update, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using optim::AdamW;
using optim::AdamWOptions;
using testing::all_close;
using testing::expect_error;
using Vec = std::vector<double>;

const Vec kP0 = {1.5, -2.0, 0.25, 3.0, -0.75};
const std::vector<Vec> kG = {
    {0.5, -1.0, 2.0, -0.25, 0.0}, {-0.3, 0.7, 1.1, 0.4, 0.05}, {0.2, 0.4, -0.6, -1.5, -0.1}};

// The bias-corrected moments in closed form: with zero initial state,
//   mhat_k = Σ_j b1^(k-j)·g_j / Σ_j b1^(k-j)   (j = 1..k; the (1 - b1) factors cancel with 1 - b1^k)
// and vhat_k the same with b2 and g_j². `power` picks g (1) or g² (2).
double corrected_moment(double beta, size_t k, size_t i, int power) {
  double num = 0, den = 0;
  for (size_t j = 0; j < k; ++j) {
    const double w = std::pow(beta, static_cast<double>(k - 1 - j));
    num += w * std::pow(kG[j][i], power);
    den += w;
  }
  return num / den;
}

// p after steps 1..3: p_k = (1 - lr·wd)·p_{k-1} - lr·mhat_k / (sqrt(vhat_k) + eps).
std::vector<Vec> expected_steps(double lr, double b1, double b2, double eps, double wd) {
  std::vector<Vec> out;
  Vec p = kP0;
  for (size_t k = 1; k <= kG.size(); ++k) {
    for (size_t i = 0; i < p.size(); ++i) {
      const double mhat = corrected_moment(b1, k, i, 1), vhat = corrected_moment(b2, k, i, 2);
      p[i] = (1 - lr * wd) * p[i] - lr * mhat / (std::sqrt(vhat) + eps);
    }
    out.push_back(p);
  }
  return out;
}

void check_steps(const AdamWOptions& o) {
  const std::vector<Vec> expected = expected_steps(o.lr(), o.beta1(), o.beta2(), o.eps(), o.weight_decay());
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 2e-6 : 1e-12;
    Tensor p = from_vector(kP0, {5}, dt).requires_grad_();
    AdamW opt({p}, o);
    for (size_t k = 0; k < expected.size(); ++k) {
      p.set_grad(from_vector(kG[k], {5}, dt));
      opt.step();
      EXPECT_TRUE(all_close(p, expected[k], tol, tol)) << dtype_name(dt) << " step " << k + 1;
    }
  }
}

TEST(AdamW, StepsWithoutWeightDecay) {
  // Step 1 alone is p0 - lr·g/(|g| + eps) whatever the betas; eps = 1e-3 makes eps visible.
  check_steps(AdamWOptions(0.05).betas(0.8, 0.95).eps(1e-3).weight_decay(0));
  check_steps(AdamWOptions(0.01).weight_decay(0));
}

TEST(AdamW, StepsWithWeightDecay) {
  check_steps(AdamWOptions(0.05).betas(0.8, 0.95).eps(1e-3).weight_decay(0.2));
  check_steps(AdamWOptions(0.1).betas(0.5, 0.9).weight_decay(1.0));
}

TEST(AdamW, Options) {
  AdamWOptions d;
  EXPECT_EQ(d.lr(), 1e-3);
  EXPECT_EQ(d.beta1(), 0.9);
  EXPECT_EQ(d.beta2(), 0.999);
  EXPECT_EQ(d.eps(), 1e-8);
  EXPECT_EQ(d.weight_decay(), 0.01);
  AdamWOptions o = AdamWOptions(3e-4).betas(0.85, 0.95).eps(1e-6).weight_decay(0.1);
  EXPECT_EQ(o.lr(), 3e-4);
  EXPECT_EQ(o.beta1(), 0.85);
  EXPECT_EQ(o.beta2(), 0.95);
  EXPECT_EQ(o.eps(), 1e-6);
  EXPECT_EQ(o.weight_decay(), 0.1);
  Tensor p = zeros({2}).requires_grad_();
  AdamW opt({p}, o);
  EXPECT_EQ(opt.lr(), 3e-4);
}

TEST(AdamW, StateOrderAndSkipsParametersWithoutGradient) {
  Tensor a = tensor({1.0, 2.0}).requires_grad_(), b = tensor({3.0, 4.0, 5.0}).requires_grad_();
  AdamW opt({a, b}, AdamWOptions(0.1).betas(0.5, 0.75).weight_decay(0));
  b.set_grad(tensor({2.0, -4.0, 1.0}));
  opt.step();
  EXPECT_TRUE(all_close(a, {1.0, 2.0}));
  // Step 1 moves every element by lr·g/(|g| + eps) ≈ lr·sign(g).
  EXPECT_TRUE(all_close(b, {2.9, 4.1, 4.9}, 1e-6));
  // state() is {m_a, m_b, v_a, v_b}; a's state stays zero.
  std::vector<Tensor> st = opt.state();
  ASSERT_EQ(st.size(), 4u);
  EXPECT_TRUE(all_close(st[0], {0.0, 0.0}));
  EXPECT_TRUE(all_close(st[1], {1.0, -2.0, 0.5}));  // (1 - b1)·g
  EXPECT_TRUE(all_close(st[2], {0.0, 0.0}));
  EXPECT_TRUE(all_close(st[3], {1.0, 4.0, 0.25}));  // (1 - b2)·g²
  EXPECT_EQ(opt.step_count(), 1);
}

TEST(AdamW, MinimizesQuadratic) {
  // L(w) = sum((w - c)²); without weight decay the minimum is c.
  Tensor w = tensor({3.0, -1.0, 0.5, 2.0, -4.0}, DType::f64).requires_grad_();
  Tensor c = tensor({1.0, 2.0, -0.5, 0.0, 1.5}, DType::f64);
  AdamW opt({w}, AdamWOptions(0.05).weight_decay(0));
  double first_loss = 0, loss_value = 0;
  for (int it = 0; it < 1000; ++it) {
    if (it == 600) opt.set_lr(0.005);  // a schedule: lr changes without touching anything else
    Tensor d = sub(w, c);
    Tensor loss = sum(mul(d, d));
    loss_value = loss.item<double>();
    if (it == 0) first_loss = loss_value;
    loss.backward();
    opt.step();
    opt.zero_grad();
  }
  EXPECT_GT(first_loss, 10.0);
  EXPECT_LT(loss_value, 1e-6);
  EXPECT_TRUE(all_close(w, c, 0, 1e-3));
}

TEST(AdamW, TracedUpdateIsSymbolic) {
  Tensor p = zeros({4}, DType::f64).requires_grad_();
  AdamW opt({p});
  const uint64_t before = kernels_run();
  std::vector<optim::Write> w =
      opt.update(0, symbolic({4}, DType::f64), symbolic({}, DType::f64), symbolic({}, DType::f64));
  EXPECT_EQ(kernels_run(), before);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_TRUE(w[0].target.same(p));
  EXPECT_TRUE(w[1].target.same(opt.state()[0]));
  EXPECT_TRUE(w[2].target.same(opt.state()[1]));
  for (const optim::Write& x : w) {
    EXPECT_TRUE(x.value.is_symbolic());
    EXPECT_EQ(x.value.meta(), x.target.meta());
  }
}

TEST(AdamW, Errors) {
  Tensor p = zeros({3}).requires_grad_();
  expect_error<ValueError>([&] { AdamW({p}, AdamWOptions(-1e-3)); }, {"AdamW", "lr"});
  expect_error<ValueError>([&] { AdamW({p}, AdamWOptions().betas(1.0, 0.9)); }, {"AdamW", "beta1"});
  expect_error<ValueError>([&] { AdamW({p}, AdamWOptions().betas(0.9, -0.1)); }, {"AdamW", "beta2"});
  expect_error<ValueError>([&] { AdamW({p}, AdamWOptions().eps(-1e-8)); }, {"AdamW", "eps"});
  expect_error<ValueError>([&] { AdamW({p}, AdamWOptions().weight_decay(-0.1)); }, {"AdamW", "weight_decay"});
  expect_error<DTypeError>([&] { AdamW({zeros({2, 2}, DType::i32)}); }, {"optimizer", "i32[2, 2]"});
  Tensor non_leaf = add(p, p);
  expect_error<ValueError>([&] { AdamW({non_leaf}); }, {"optimizer", "not a leaf"});
  AdamW opt({p});
  expect_error<DTypeError>(
      [&] { opt.update(0, zeros({3}, DType::f64), full({}, 0.1, DType::f64), full({}, 1.0, DType::f64)); },
      {"adam_update (adamw)", "f32[3]", "f64[3]"});
}

}  // namespace
}  // namespace tessera
