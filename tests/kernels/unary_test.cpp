// exp, log, sqrt, rsqrt, tanh, sigmoid, relu: values against <cmath>, f64 gradient checks on
// odd sizes, bf16 through the widened f32 path, saved-tensor declarations and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
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

using TensorOp = Tensor (*)(const Tensor&);
using ScalarRef = std::function<double(double)>;

struct UnaryCase {
  const char* name;
  TensorOp op;
  ScalarRef ref;
  bool positive_domain;  // log, sqrt, rsqrt: inputs in (0, ∞)
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"exp", &exp, [](double x) { return std::exp(x); }, false},
      {"log", &log, [](double x) { return std::log(x); }, true},
      {"sqrt", &sqrt, [](double x) { return std::sqrt(x); }, true},
      {"rsqrt", &rsqrt, [](double x) { return 1.0 / std::sqrt(x); }, true},
      {"tanh", &tanh, [](double x) { return std::tanh(x); }, false},
      {"sigmoid", &sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, false},
      {"relu", &relu, [](double x) { return x > 0 ? x : 0.0; }, false},
  };
}

std::vector<double> map(const Tensor& x, const ScalarRef& f) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v) e = f(e);
  return v;
}

// x moved at least `gap` away from `kink` (for ops whose derivative jumps there).
Tensor away_from(const Tensor& x, double kink, double gap) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v)
    if (std::abs(e - kink) < gap) e = e < kink ? kink - gap : kink + gap;
  return from_vector(v, x.shape(), x.dtype());
}

TEST(Unary, HandValues) {
  EXPECT_TRUE(all_close(exp(tensor({0, 1, -2})), {1, std::exp(1.0), std::exp(-2.0)}));
  EXPECT_TRUE(all_close(log(tensor({1, 4, 0.5})), {0, std::log(4.0), -std::log(2.0)}));
  EXPECT_TRUE(all_close(sqrt(tensor({4, 2.25, 0})), {2, 1.5, 0}));
  EXPECT_TRUE(all_close(rsqrt(tensor({4, 0.25})), {0.5, 2}));
  EXPECT_TRUE(all_close(tanh(tensor({0, 0.5})), {0, std::tanh(0.5)}));
  EXPECT_TRUE(all_close(sigmoid(tensor({0, 2, -2})), {0.5, 1 / (1 + std::exp(-2.0)), 1 / (1 + std::exp(2.0))}));
  EXPECT_TRUE(all_close(relu(tensor({-2, -0.5, 0, 1.5, 3})), {0, 0, 0, 1.5, 3}));
  // Extremes stay finite where the math is: σ(±1000) in f32, relu(NaN) stays NaN.
  EXPECT_TRUE(all_close(sigmoid(tensor({-1000, 1000})), {0, 1}));
  EXPECT_TRUE(std::isnan(relu(tensor({NAN})).item<double>()));
  EXPECT_TRUE(all_close(log(tensor({0})), {-INFINITY}));
}

TEST(Unary, ValuesOddSizesF32AndF64) {
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : {DType::f64, DType::f32}) {
      Tensor x = c.positive_domain ? test_rand({3, 7, 5}, 0.05, 4.0, 2, dt) : test_randn({3, 7, 5}, 2, dt);
      Tensor y = c.op(x);
      EXPECT_EQ(y.meta(), x.meta()) << c.name;
      const double rtol = dt == DType::f64 ? 1e-12 : 2e-6;
      EXPECT_TRUE(all_close(y, map(x, c.ref), rtol, 1e-7)) << c.name << " " << dt;
    }
  }
}

TEST(Unary, Gradients) {
  for (const UnaryCase& c : unary_cases()) {
    auto f = [&c](const std::vector<Tensor>& x) { return c.op(x[0]); };
    for (Shape s : {Shape{7}, Shape{3, 5}, Shape{2, 3, 5}}) {
      Tensor x = c.positive_domain ? test_rand(s, 0.2, 3.0, 4) : away_from(test_randn(s, 4), 0.0, 1e-3);
      EXPECT_TRUE(gradcheck(f, {x})) << c.name << " " << s;
    }
  }
}

TEST(Unary, ReluGradientIsMaskOfPositiveInputs) {
  Tensor x = tensor({-1.5, 2.0, -0.25, 0.75, 3.0}, DType::f64).requires_grad_();
  relu(x).backward(tensor({10, 20, 30, 40, 50}, DType::f64));
  EXPECT_TRUE(all_close(x.grad(), {0, 20, 0, 40, 50}));
}

TEST(Unary, SavesOnlyWhatTheRuleReads) {
  static_assert(op::Exp::kSaveOutputs == 1 && op::Exp::kSaveInputs == 0, "exp reads y");
  static_assert(op::Log::kSaveInputs == 1 && op::Log::kSaveOutputs == 0, "log reads x");
  static_assert(op::Sqrt::kSaveOutputs == 1 && op::Sqrt::kSaveInputs == 0, "sqrt reads y");
  static_assert(op::Rsqrt::kSaveOutputs == 1 && op::Rsqrt::kSaveInputs == 0, "rsqrt reads y");
  static_assert(op::Tanh::kSaveOutputs == 1 && op::Tanh::kSaveInputs == 0, "tanh reads y");
  static_assert(op::Sigmoid::kSaveOutputs == 1 && op::Sigmoid::kSaveInputs == 0, "sigmoid reads y");
  static_assert(op::Relu::kSaveOutputs == 1 && op::Relu::kSaveInputs == 0, "relu reads y");
  // And the rules work with only those saved: a chain of every op, differentiated.
  auto chain = [](const std::vector<Tensor>& x) {
    return relu(sigmoid(tanh(rsqrt(sqrt(log(exp(x[0])))))));
  };
  EXPECT_TRUE(gradcheck(chain, {test_rand({3, 5}, 0.5, 2.0, 8)}));
}

TEST(Unary, Bf16WidenedPath) {
  for (const UnaryCase& c : unary_cases()) {
    Tensor x32 = c.positive_domain ? test_rand({5, 9}, 0.1, 4.0, 3, DType::f32) : test_randn({5, 9}, 3, DType::f32);
    for (DType half : {DType::bf16, DType::f16}) {
      Tensor x = cast(x32, half);
      Tensor y = c.op(x);
      EXPECT_EQ(y.dtype(), half) << c.name;
      // Reference on the rounded inputs; one rounding of the output to bf16 is < 2^-8 relative.
      EXPECT_TRUE(all_close(y, map(x, c.ref), 1e-2, 1e-6)) << c.name << " " << half;
    }
  }
}

TEST(Unary, ErrorsNameOpAndMeta) {
  for (const UnaryCase& c : unary_cases()) {
    try {
      c.op(arange(5));
      ADD_FAILURE() << c.name << " accepted an i32 tensor";
    } catch (const DTypeError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find(c.name), std::string::npos) << m;
      EXPECT_NE(m.find("i32[5]"), std::string::npos) << m;
    }
  }
}

TEST(Unary, SymbolicShapes) {
  Tensor s = symbolic({4, 6}, DType::bf16);
  for (const UnaryCase& c : unary_cases()) {
    Tensor y = c.op(s);
    EXPECT_TRUE(y.is_symbolic()) << c.name;
    EXPECT_EQ(y.meta(), s.meta()) << c.name;
  }
}

}  // namespace
}  // namespace tessera
