// gelu (exact and tanh), gelu_backward (closed form) and fast_gelu: values, f64 gradient
// checks on odd sizes, half inputs, errors; gelu with a bf16/f16 output of f32 x and
// gelu_backward with its bf16/f16 gradient, bitwise against the explicit casts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
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

// Same dtype, shape and bytes.
::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want) {
  if (!(got.meta() == want.meta())) return ::testing::AssertionFailure() << got.meta() << " vs " << want.meta();
  if (std::memcmp(got.data_ptr(), want.data_ptr(), want.nbytes()) != 0)
    return ::testing::AssertionFailure() << "values of " << want.meta() << " differ";
  return ::testing::AssertionSuccess();
}

// f32 x of odd sizes (one past kParallelGrain-sized chunks too), N(0, 3²): both tails of gelu.
std::vector<Tensor> narrowing_inputs() {
  std::vector<Tensor> xs;
  uint64_t seed = 40;
  for (const Shape& s : {Shape{1}, Shape{7}, Shape{33, 65}, Shape{3, 16385}})
    xs.push_back(mul(test_randn(s, ++seed, DType::f32), 3.0));
  return xs;
}

TEST(Gelu, NarrowedOutputIsTheCastOfTheF32Output) {
  for (const Tensor& x : narrowing_inputs())
    for (GeluApprox a : {GeluApprox::none, GeluApprox::tanh}) {
      for (DType out : {DType::bf16, DType::f16}) {
        const Tensor y = gelu(x, a, out);
        EXPECT_EQ(y.dtype(), out);
        EXPECT_TRUE(same_bits(y, cast(gelu(x, a), out))) << gelu_approx_name(a) << " " << out << " " << x.shape();
      }
      EXPECT_TRUE(same_bits(gelu(x, a, DType::f32), gelu(x, a)));  // out = x's dtype: the plain op
    }
  const Tensor xb = cast(test_randn({9}, 49, DType::f32), DType::bf16);
  EXPECT_TRUE(same_bits(gelu(xb, GeluApprox::tanh, DType::bf16), gelu(xb, GeluApprox::tanh)));
}

TEST(Gelu, BackwardReadsAHalfGradientOfF32InputAsItsWidening) {
  uint64_t seed = 50;
  for (const Tensor& x : narrowing_inputs())
    for (GeluApprox a : {GeluApprox::none, GeluApprox::tanh})
      for (DType gt : {DType::bf16, DType::f16}) {
        const Tensor g = cast(test_randn(x.shape(), ++seed, DType::f32), gt);
        const Tensor dx = gelu_backward(g, x, a);
        EXPECT_EQ(dx.dtype(), DType::f32);
        EXPECT_TRUE(same_bits(dx, gelu_backward(cast(g, DType::f32), x, a))) << gelu_approx_name(a) << " " << gt;
      }
}

TEST(Gelu, GradientThroughTheNarrowedOutputEqualsThroughTheCast) {
  for (GeluApprox a : {GeluApprox::none, GeluApprox::tanh})
    for (DType out : {DType::bf16, DType::f16}) {
      const Tensor x0 = mul(test_randn({33, 65}, 60, DType::f32), 2.0);
      const Tensor seed = cast(test_randn({33, 65}, 61, DType::f32), out);
      Tensor x1 = x0.detach().clone().requires_grad_(), x2 = x0.detach().clone().requires_grad_();
      const Tensor y1 = gelu(x1, a, out), y2 = cast(gelu(x2, a), out);
      EXPECT_TRUE(same_bits(y1, y2));
      mul(y1, seed).backward(cast(full({33, 65}, 1.0, DType::f32), out));
      mul(y2, seed).backward(cast(full({33, 65}, 1.0, DType::f32), out));
      ASSERT_TRUE(x1.grad().defined() && x2.grad().defined());
      EXPECT_EQ(x1.grad().dtype(), DType::f32);
      EXPECT_TRUE(same_bits(x1.grad(), x2.grad())) << gelu_approx_name(a) << " " << out;
    }
}

TEST(Gelu, OutputAndGradientDtypeErrors) {
  const Tensor x = zeros({2, 3});
  expect_error<DTypeError>([&] { gelu(cast(x, DType::bf16), GeluApprox::none, DType::f32); },
                           {"gelu", "output dtype f32", "bf16[2, 3]"});
  expect_error<DTypeError>([&] { gelu(cast(x, DType::f64), GeluApprox::tanh, DType::bf16); },
                           {"gelu", "output dtype bf16", "f64[2, 3]"});
  expect_error<DTypeError>([&] { gelu(x, GeluApprox::none, DType::f64); }, {"gelu", "f64", "f32[2, 3]"});
  expect_error<DTypeError>([&] { gelu(x, GeluApprox::none, DType::i32); }, {"gelu", "i32"});
  expect_error<DTypeError>([&] { gelu_backward(cast(x, DType::bf16), cast(x, DType::f64)); },
                           {"gelu_backward", "bf16[2, 3]", "f64[2, 3]"});
  expect_error<DTypeError>([&] { gelu_backward(x, cast(x, DType::bf16)); },
                           {"gelu_backward", "f32[2, 3]", "bf16[2, 3]"});
  expect_error<DTypeError>([&] { gelu_backward(cast(x, DType::i32), x); }, {"gelu_backward", "i32[2, 3]"});
  expect_error<ShapeError>([&] { gelu_backward(zeros({3, 2}, DType::bf16), x); }, {"gelu_backward", "[3, 2]"});
}

}  // namespace
}  // namespace tessera
