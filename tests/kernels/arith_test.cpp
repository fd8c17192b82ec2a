// sub, mul, div, neg, mul_scalar: values and f64 gradient checks (broadcasting, odd sizes).
#include <gtest/gtest.h>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::test_rand;
using testing::test_randn;

TEST(Arith, Values) {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor r = tensor({2, 4, 8});
  EXPECT_TRUE(all_close(sub(a, r), {-1, -2, -5, 2, 1, -2}));
  EXPECT_TRUE(all_close(mul(a, r), {2, 8, 24, 8, 20, 48}));
  EXPECT_TRUE(all_close(div(a, r), {0.5, 0.5, 0.375, 2, 1.25, 0.75}));
  EXPECT_TRUE(all_close(neg(a), {-1, -2, -3, -4, -5, -6}));
  EXPECT_TRUE(all_close(mul(a, 0.5), {0.5, 1, 1.5, 2, 2.5, 3}));
  EXPECT_TRUE(all_close(div(a, 4.0), {0.25, 0.5, 0.75, 1, 1.25, 1.5}));
  EXPECT_THROW(div(a, 0.0), ValueError);
}

TEST(Arith, Gradients) {
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  for (Fn f : {static_cast<Fn>(&sub), static_cast<Fn>(&mul)}) {
    auto g = [f](const std::vector<Tensor>& x) { return f(x[0], x[1]); };
    EXPECT_TRUE(gradcheck(g, {test_randn({3, 5}, 1), test_randn({3, 5}, 2)}));
    EXPECT_TRUE(gradcheck(g, {test_randn({2, 3, 5}, 1), test_randn({3, 1}, 2)}));
    EXPECT_TRUE(gradcheck(g, {test_randn({1}, 1), test_randn({4, 7}, 2)}));
  }
  auto d = [](const std::vector<Tensor>& x) { return div(x[0], x[1]); };
  EXPECT_TRUE(gradcheck(d, {test_randn({3, 5}, 1), test_rand({3, 5}, 0.5, 2.0, 2)}));
  EXPECT_TRUE(gradcheck(d, {test_randn({2, 3, 5}, 1), test_rand({5}, 0.5, 2.0, 2)}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return neg(x[0]); }, {test_randn({7}, 3)}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return mul(x[0], -1.7); }, {test_randn({3, 3}, 3)}));
}

}  // namespace
}  // namespace tessera
