// Tensor arithmetic operators (kernels/operators.h): values and gradients match the named ops.
#include <gtest/gtest.h>

#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::test_rand;
using testing::test_randn;

TEST(Operators, TensorTensorBroadcast) {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = tensor({2, 4, 8});
  EXPECT_TRUE(all_close(a + b, {3, 6, 11, 6, 9, 14}));
  EXPECT_TRUE(all_close(a - b, {-1, -2, -5, 2, 1, -2}));
  EXPECT_TRUE(all_close(a * b, {2, 8, 24, 8, 20, 48}));
  EXPECT_TRUE(all_close(a / b, {0.5, 0.5, 0.375, 2, 1.25, 0.75}));
  EXPECT_TRUE(all_close(-a, {-1, -2, -3, -4, -5, -6}));
}

TEST(Operators, TensorScalarBothSides) {
  Tensor x = tensor({1, -2, 4, 0.5, 8});
  EXPECT_TRUE(all_close(x + 1.5, {2.5, -0.5, 5.5, 2, 9.5}));
  EXPECT_TRUE(all_close(1.5 + x, {2.5, -0.5, 5.5, 2, 9.5}));
  EXPECT_TRUE(all_close(x - 1.5, {-0.5, -3.5, 2.5, -1, 6.5}));
  EXPECT_TRUE(all_close(1.5 - x, {0.5, 3.5, -2.5, 1, -6.5}));
  EXPECT_TRUE(all_close(x * 3, {3, -6, 12, 1.5, 24}));  // int literal converts to double
  EXPECT_TRUE(all_close(3 * x, {3, -6, 12, 1.5, 24}));
  EXPECT_TRUE(all_close(x / 4, {0.25, -0.5, 1, 0.125, 2}));
  EXPECT_TRUE(all_close(4 / x, {4, -2, 1, 8, 0.5}));
}

TEST(Operators, ExpressionMatchesNamedOps) {
  Tensor x = test_randn({3, 7}, 51), mu = test_randn({7}, 52), s = test_rand({7}, 0.5, 2.0, 53);
  Tensor by_ops = add(mul(div(sub(x, mu), s), 2.0), 1.0);
  Tensor by_operators = (x - mu) / s * 2.0 + 1.0;
  EXPECT_TRUE(all_close(by_operators, by_ops, 0, 0));
  // Precedence is C++'s: 1 - x * 2 is 1 - (x * 2); unary minus binds tightest.
  EXPECT_TRUE(all_close(1.0 - x * 2.0, sub(1.0, mul(x, 2.0)), 0, 0));
  EXPECT_TRUE(all_close(-x * 2.0, mul(neg(x), 2.0), 0, 0));
}

TEST(Operators, Gradients) {
  auto f = [](const std::vector<Tensor>& t) {
    const Tensor &a = t[0], &b = t[1];
    return (a - b) * (a + 2.0) / (b * b + 1.0) - 3.0 / (b * b + 0.5) + (-a) * 0.25 - (1.5 - b);
  };
  EXPECT_TRUE(gradcheck(f, {test_randn({3, 5}, 54), test_randn({3, 5}, 55)}));
  EXPECT_TRUE(gradcheck(f, {test_randn({2, 3, 5}, 56), test_randn({5}, 57)}));
}

}  // namespace
}  // namespace tessera
