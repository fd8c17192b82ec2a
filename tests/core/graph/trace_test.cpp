// Tracing and compiling steps without an optimizer: gradients equal eager mode's, shape
// changes re-plan, bad feeds and untraceable code give clear errors.
#include <gtest/gtest.h>

#include "core/graph/compile.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::test_randn;

struct Mlp {
  Tensor w1 = test_randn({12, 16}, 1, DType::f32).requires_grad_();
  Tensor b1 = test_randn({16}, 2, DType::f32).requires_grad_();
  Tensor w2 = test_randn({16, 5}, 3, DType::f32).requires_grad_();
  Tensor loss(const Tensor& x, const Tensor& y) const {
    Tensor h = gelu(add(matmul(x, w1), b1));
    return cross_entropy(matmul(h, w2), y);
  }
  std::vector<graph::NamedParam> named() const { return {{"w1", w1}, {"b1", b1}, {"w2", w2}}; }
};

Tensor labels(int n, int classes, int seed) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = (i * 7 + seed) % classes;
  return from_vector(v, {n});
}

TEST(Trace, GradientsEqualEagerExactly) {
  Mlp m;
  Tensor x = test_randn({9, 12}, 4, DType::f32), y = labels(9, 5, 1);
  CompiledStep step = compile([&](const auto& in) { return m.loss(in.at("x"), in.at("y")); }, m.named(), nullptr,
                              {{"x", x}, {"y", y}});
  double loss = step.run({{"x", x}, {"y", y}});
  Tensor eager = m.loss(x, y);
  eager.backward();
  EXPECT_EQ(loss, eager.item<double>());
  // Same kernels in the same order: bitwise equal.
  EXPECT_TRUE(all_close(step.fetch("grad/w1"), m.w1.grad(), 0, 0));
  EXPECT_TRUE(all_close(step.fetch("grad/b1"), m.b1.grad(), 0, 0));
  EXPECT_TRUE(all_close(step.fetch("grad/w2"), m.w2.grad(), 0, 0));
  // Parameters were restored after tracing: still concrete, still leaves requiring grad.
  EXPECT_FALSE(m.w1.is_symbolic());
  EXPECT_TRUE(m.w1.requires_grad());
}

TEST(Trace, ParameterUsedTwiceAccumulates) {
  Tensor w = test_randn({6, 6}, 5, DType::f64).requires_grad_();
  auto f = [&](const Tensor& x) { return sum(matmul(matmul(x, w), w)); };
  Tensor x = test_randn({3, 6}, 6, DType::f64);
  CompiledStep step = compile([&](const auto& in) { return f(in.at("x")); }, {w}, nullptr, {{"x", x}});
  step.run({{"x", x}});
  f(x).backward();
  EXPECT_TRUE(all_close(step.fetch("grad/0"), w.grad(), 0, 0));
}

TEST(Trace, NewInputShapeTracesAgainAndOldPlanStaysCached) {
  Mlp m;
  auto fn = [&](const std::map<std::string, Tensor>& in) { return m.loss(in.at("x"), in.at("y")); };
  Tensor x9 = test_randn({9, 12}, 7, DType::f32), y9 = labels(9, 5, 2);
  Tensor x4 = test_randn({4, 12}, 8, DType::f32), y4 = labels(4, 5, 3);
  CompiledStep step = compile(fn, m.named(), nullptr, {{"x", x9}, {"y", y9}});
  EXPECT_EQ(step.cached_plans(), 1u);
  double l4 = step.run({{"x", x4}, {"y", y4}});
  EXPECT_EQ(step.cached_plans(), 2u);
  EXPECT_EQ(l4, m.loss(x4, y4).item<double>());
  double l9 = step.run({{"x", x9}, {"y", y9}});
  EXPECT_EQ(step.cached_plans(), 2u);
  EXPECT_EQ(l9, m.loss(x9, y9).item<double>());
}

TEST(Trace, BadFeedsAreClearErrors) {
  Mlp m;
  Tensor x = test_randn({9, 12}, 9, DType::f32), y = labels(9, 5, 4);
  CompiledStep step = compile([&](const auto& in) { return m.loss(in.at("x"), in.at("y")); }, m.named(), nullptr,
                              {{"x", x}, {"y", y}});
  testing::expect_error<DTypeError>([&] { step.run({{"x", test_randn({9, 12}, 9, DType::f64)}, {"y", y}}); },
                                    {"input 'x'", "f64", "f32"});
  testing::expect_error<ValueError>([&] { step.run({{"x", x}}); }, {"input 'y'", "missing"});
  testing::expect_error<ValueError>([&] { step.run({{"x", x}, {"y", y}, {"z", y}}); }, {"'z'"});
}

TEST(Trace, ReadingAValueInsideTheTraceIsAClearError) {
  Tensor w = test_randn({4}, 10, DType::f32).requires_grad_();
  auto fn = [&](const std::map<std::string, Tensor>& in) {
    Tensor s = sum(mul(in.at("x"), w));
    if (s.item<float>() > 0) return s;  // data-dependent control flow cannot be traced
    return neg(s);
  };
  testing::expect_error<ValueError>([&] { compile(fn, {w}, nullptr, {{"x", ones({4})}}); }, {"item()", "symbolic"});
  EXPECT_FALSE(w.is_symbolic()) << "a failed trace must restore the parameters";
}

TEST(Trace, DropoutWithoutTheStepsRngIsRefusedInsteadOfRepeatingItsMask) {
  Tensor w = test_randn({4}, 11, DType::f32).requires_grad_();
  auto fn = [&](const std::map<std::string, Tensor>& in) { return sum(dropout(mul(in.at("x"), w), 0.5)); };
  testing::expect_error<ValueError>([&] { compile(fn, {w}, nullptr, {{"x", ones({4})}}); }, {"dropout", "rng"});
  Generator other(5);  // the loss draws from the default generator, not from this one
  testing::expect_error<ValueError>([&] { compile(fn, {w}, nullptr, {{"x", ones({4})}}, &other); },
                                    {"dropout", "seed 5"});
}

TEST(Trace, ConstantsUsedByTheLossAreCaptured) {
  Tensor w = test_randn({5}, 12, DType::f64).requires_grad_();
  Tensor scale = tensor({1, 2, 3, 4, 5}, DType::f64);  // a concrete tensor the loss closes over
  auto fn = [&](const std::map<std::string, Tensor>& in) { return sum(mul(mul(in.at("x"), w), scale)); };
  Tensor x = test_randn({5}, 13, DType::f64);
  CompiledStep step = compile(fn, {w}, nullptr, {{"x", x}});
  step.run({{"x", x}});
  EXPECT_TRUE(all_close(step.fetch("grad/0"), mul(x, scale), 0, 0));
  EXPECT_NE(step.to_dot().find("constant"), std::string::npos);
  EXPECT_NE(step.summary().find("arena"), std::string::npos);
}

}  // namespace
}  // namespace tessera
