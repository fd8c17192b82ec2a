// pow_scalar, add_scalar (add/sub with a double, s - x, s / x) and clamp: values, f64 gradient
// checks on odd sizes (positive inputs for pow; inputs kept 1e-3 away from clamp's bounds), errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::test_rand;
using testing::test_randn;

// x moved at least `gap` away from each of `kinks`.
Tensor away_from(const Tensor& x, const std::vector<double>& kinks, double gap) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v)
    for (double k : kinks)
      if (std::abs(e - k) < gap) e = e < k ? k - gap : k + gap;
  return from_vector(v, x.shape(), x.dtype());
}

TEST(UnaryScalar, PowValues) {
  Tensor x = tensor({0.5, 2, 3, 1.5, 4});
  EXPECT_TRUE(all_close(pow(x, 2.0), {0.25, 4, 9, 2.25, 16}));
  EXPECT_TRUE(all_close(pow(x, -1.0), {2, 0.5, 1.0 / 3, 1.0 / 1.5, 0.25}));
  EXPECT_TRUE(all_close(pow(x, 0.5), {std::sqrt(0.5), std::sqrt(2.0), std::sqrt(3.0), std::sqrt(1.5), 2}, 1e-6));
  EXPECT_TRUE(all_close(pow(x, 0.0), {1, 1, 1, 1, 1}));
  EXPECT_TRUE(all_close(pow(x, 1.0), {0.5, 2, 3, 1.5, 4}));
  EXPECT_TRUE(all_close(pow(x, 2.5), {std::pow(0.5, 2.5), std::pow(2.0, 2.5), std::pow(3.0, 2.5), std::pow(1.5, 2.5), 32},
                        1e-6));
  // Integer exponents of negative bases are real; fractional ones are NaN (std::pow).
  EXPECT_TRUE(all_close(pow(tensor({-2, -0.5}, DType::f64), 3.0), {-8, -0.125}));
  EXPECT_TRUE(std::isnan(pow(tensor({-2}), 0.5).item<double>()));
  // Odd size, f64, against std::pow.
  Tensor r = test_rand({3, 7, 5}, 0.1, 3.0, 5);
  std::vector<double> ref = r.to_vector<double>();
  for (double& e : ref) e = std::pow(e, -1.7);
  EXPECT_TRUE(all_close(pow(r, -1.7), ref, 1e-13));
}

TEST(UnaryScalar, PowGradients) {
  for (double p : {2.0, 3.0, -1.0, 0.5, 2.5, -1.5, 1.0, 0.0}) {
    auto f = [p](const std::vector<Tensor>& x) { return pow(x[0], p); };
    EXPECT_TRUE(gradcheck(f, {test_rand({3, 5}, 0.3, 2.5, 7)})) << "p = " << p;
    EXPECT_TRUE(gradcheck(f, {test_rand({7}, 0.3, 2.5, 8)})) << "p = " << p;
  }
  // Integer exponent: negative inputs too.
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return pow(x[0], 3.0); }, {test_randn({2, 3, 5}, 9)}));
}

TEST(UnaryScalar, AddSubScalarValues) {
  Tensor x = tensor({1, -2, 3.5, 0.25, 7}, {5});
  EXPECT_TRUE(all_close(add(x, 1.5), {2.5, -0.5, 5, 1.75, 8.5}));
  EXPECT_TRUE(all_close(sub(x, 1.5), {-0.5, -3.5, 2, -1.25, 5.5}));
  EXPECT_TRUE(all_close(sub(1.5, x), {0.5, 3.5, -2, 1.25, -5.5}));
  EXPECT_TRUE(all_close(rsub(x, 1.5), {0.5, 3.5, -2, 1.25, -5.5}));
  EXPECT_TRUE(all_close(div(3.0, x), {3, -1.5, 3 / 3.5, 12, 3.0 / 7}, 1e-6));
  Tensor r = test_randn({3, 7}, 11);
  std::vector<double> v = r.to_vector<double>(), ref(v.size());
  for (size_t i = 0; i < v.size(); ++i) ref[i] = -0.3 / v[i];
  EXPECT_TRUE(all_close(div(-0.3, r), ref, 1e-14));
}

TEST(UnaryScalar, AddSubDivScalarGradients) {
  auto x = test_randn({3, 5}, 12);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return add(t[0], 2.5); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return sub(t[0], -0.75); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return sub(1.25, t[0]); }, {test_randn({7}, 13)}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return div(2.0, t[0]); }, {test_rand({2, 3, 5}, 0.5, 2.0, 14)}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return div(-1.5, t[0]); }, {test_rand({7}, -2.0, -0.5, 15)}));
}

TEST(UnaryScalar, ClampValues) {
  Tensor x = tensor({-3, -1, 0.5, 1, 2, 7});
  EXPECT_TRUE(all_close(clamp(x, -1.0, 2.0), {-1, -1, 0.5, 1, 2, 2}));
  EXPECT_TRUE(all_close(clamp(x, 0.75, std::nullopt), {0.75, 0.75, 0.75, 1, 2, 7}));
  EXPECT_TRUE(all_close(clamp(x, std::nullopt, 0.75), {-3, -1, 0.5, 0.75, 0.75, 0.75}));
  EXPECT_TRUE(all_close(clamp(x, std::nullopt, std::nullopt), {-3, -1, 0.5, 1, 2, 7}));
  EXPECT_TRUE(all_close(clamp(x, 1.0, 1.0), {1, 1, 1, 1, 1, 1}));
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(all_close(clamp(x, -inf, 1.5), {-3, -1, 0.5, 1, 1.5, 1.5}));
  EXPECT_TRUE(std::isnan(clamp(tensor({NAN}), 0.0, 1.0).item<double>()));
  // Odd size, f64.
  Tensor r = test_randn({3, 7, 5}, 16);
  std::vector<double> ref = r.to_vector<double>();
  for (double& e : ref) e = std::min(std::max(e, -0.4), 0.9);
  EXPECT_TRUE(all_close(clamp(r, -0.4, 0.9), ref, 0, 0));
}

TEST(UnaryScalar, ClampGradients) {
  struct Bounds {
    std::optional<double> lo, hi;
  };
  for (Bounds b : {Bounds{-0.5, 0.8}, Bounds{0.1, std::nullopt}, Bounds{std::nullopt, -0.2}, Bounds{}}) {
    std::vector<double> kinks;
    if (b.lo) kinks.push_back(*b.lo);
    if (b.hi) kinks.push_back(*b.hi);
    auto f = [b](const std::vector<Tensor>& x) { return clamp(x[0], b.lo, b.hi); };
    EXPECT_TRUE(gradcheck(f, {away_from(test_randn({3, 5}, 17), kinks, 1e-3)}));
    EXPECT_TRUE(gradcheck(f, {away_from(test_randn({2, 3, 7}, 18), kinks, 1e-3)}));
  }
  // At a bound the gradient passes (lo <= x <= hi); outside it is 0.
  Tensor x = tensor({-2, -1, 0, 1, 2}, DType::f64).requires_grad_();
  clamp(x, -1.0, 1.0).backward(tensor({1, 2, 3, 4, 5}, DType::f64));
  EXPECT_TRUE(all_close(x.grad(), {0, 2, 3, 4, 0}));
}

TEST(UnaryScalar, Errors) {
  try {
    clamp(zeros({2, 3}), 2.0, 1.0);
    FAIL() << "clamp accepted lo > hi";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("clamp"), std::string::npos) << m;
    EXPECT_NE(m.find("f32[2, 3]"), std::string::npos) << m;
  }
  EXPECT_THROW(clamp(zeros({2}), NAN, 1.0), ValueError);
  try {
    pow(arange(3), 2.0);
    FAIL() << "pow accepted i32";
  } catch (const DTypeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("pow_scalar"), std::string::npos) << m;
    EXPECT_NE(m.find("i32[3]"), std::string::npos) << m;
  }
  EXPECT_THROW(add(arange(3), 1.0), DTypeError);
  EXPECT_THROW(clamp(arange(3), 0.0, 1.0), DTypeError);
}

}  // namespace
}  // namespace tessera
