// gelu (exact and tanh), gelu_backward (closed form) and fast_gelu: values, f64 gradient
// checks on odd sizes, half inputs, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::test_randn;

double gelu_exact_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::acos(-1.0)) * (x + 0.044715 * x * x * x)));
}
double fast_gelu_ref(double x) { return x / (1 + std::exp(-1.702 * x)); }

std::vector<double> map(const Tensor& x, double (*f)(double)) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v) e = f(e);
  return v;
}

TEST(Gelu, HandValues) {
  Tensor x = tensor({1, -1, 0, 2.5});
  EXPECT_TRUE(all_close(gelu(x), {0.8413447460685429, -0.15865525393145707, 0, 2.5 * 0.9937903346742238}, 1e-6));
  EXPECT_TRUE(all_close(gelu(x, GeluApprox::tanh), {0.8411919906082768, -0.15880800939172324, 0, 2.484915733910001}, 1e-6));
  EXPECT_TRUE(all_close(fast_gelu(x), {0.8457957659328212, -0.1542042340671787, 0, fast_gelu_ref(2.5)}, 1e-6));
  // Far tails: gelu -> x on the right, -> 0 on the left, without NaN.
  EXPECT_TRUE(all_close(gelu(tensor({-60, 60})), {0, 60}));
  EXPECT_TRUE(all_close(fast_gelu(tensor({-1000, 1000})), {0, 1000}));
}

TEST(Gelu, ValuesOddSizes) {
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor x = mul(test_randn({3, 7, 5}, 21, dt), 2.0);
    const double rtol = dt == DType::f64 ? 1e-12 : 2e-6;
    // In f32 the left tail is x·(1 + erf)/2 or x·(1 + tanh)/2 with the sum cancelling: absolute
    // errors of a few f32 ulps of 1 are expected there.
    const double atol = dt == DType::f64 ? 1e-7 : 5e-7;
    EXPECT_TRUE(all_close(gelu(x), map(x, gelu_exact_ref), rtol, atol)) << dt;
    EXPECT_TRUE(all_close(gelu(x, GeluApprox::tanh), map(x, gelu_tanh_ref), rtol, atol)) << dt;
    EXPECT_TRUE(all_close(fast_gelu(x), map(x, fast_gelu_ref), rtol, atol)) << dt;
  }
  // The tanh form approximates the exact one to ~1e-3.
  Tensor x = test_randn({101}, 22);
  EXPECT_TRUE(all_close(gelu(x, GeluApprox::tanh), map(x, gelu_exact_ref), 0, 2e-3));
}

TEST(Gelu, Gradients) {
  for (GeluApprox a : {GeluApprox::none, GeluApprox::tanh}) {
    auto f = [a](const std::vector<Tensor>& x) { return gelu(x[0], a); };
    EXPECT_TRUE(gradcheck(f, {mul(test_randn({3, 5}, 23), 2.0)})) << gelu_approx_name(a);
    EXPECT_TRUE(gradcheck(f, {test_randn({2, 3, 7}, 24)})) << gelu_approx_name(a);
  }
  auto fg = [](const std::vector<Tensor>& x) { return fast_gelu(x[0]); };
  EXPECT_TRUE(gradcheck(fg, {mul(test_randn({3, 5}, 25), 2.0)}));
  EXPECT_TRUE(gradcheck(fg, {test_randn({7}, 26)}));
}

TEST(Gelu, BackwardOpAgainstFiniteDifferences) {
  // gelu_backward(g, x) = g·gelu'(x), gelu' by central differences of the reference.
  Tensor x = mul(test_randn({5, 3}, 27), 2.0), g = test_randn({5, 3}, 28);
  const std::vector<double> xv = x.to_vector<double>(), gv = g.to_vector<double>();
  for (GeluApprox a : {GeluApprox::none, GeluApprox::tanh}) {
    double (*ref)(double) = a == GeluApprox::none ? &gelu_exact_ref : &gelu_tanh_ref;
    std::vector<double> want(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) want[i] = gv[i] * (ref(xv[i] + 1e-6) - ref(xv[i] - 1e-6)) / 2e-6;
    EXPECT_TRUE(all_close(gelu_backward(g, x, a), want, 1e-7, 1e-8)) << gelu_approx_name(a);
    EXPECT_TRUE(all_close(gelu_backward(cast(g, DType::f32), cast(x, DType::f32), a), want, 1e-5, 1e-6));
  }
  // Not differentiable itself: its output records no autograd history.
  Tensor gx = g.detach().clone().requires_grad_();
  EXPECT_FALSE(gelu_backward(gx, x).requires_grad());
}

TEST(Gelu, HalfInputs) {
  Tensor x = cast(test_randn({4, 9}, 29, DType::f32), DType::bf16);
  Tensor y = gelu(x, GeluApprox::tanh);
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(y, map(x, gelu_tanh_ref), 1e-2, 1e-3));
  EXPECT_TRUE(all_close(fast_gelu(cast(x, DType::f16)), map(x, fast_gelu_ref), 1e-2, 1e-3));
}

TEST(Gelu, Errors) {
  try {
    gelu_backward(zeros({2, 3}), zeros({3, 2}));
    FAIL() << "gelu_backward accepted mismatched shapes";
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("gelu_backward"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 2]"), std::string::npos) << m;
  }
  EXPECT_THROW(gelu_backward(zeros({2}), zeros({2}, DType::f64)), DTypeError);
  try {
    gelu(arange(4), GeluApprox::tanh);
    FAIL() << "gelu accepted i32";
  } catch (const DTypeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("gelu"), std::string::npos) << m;
    EXPECT_NE(m.find("i32[4]"), std::string::npos) << m;
  }
  EXPECT_THROW(gelu(zeros({2}), static_cast<GeluApprox>(7)), ValueError);
  EXPECT_THROW(fast_gelu(arange(2)), DTypeError);
}

}  // namespace
}  // namespace tessera
