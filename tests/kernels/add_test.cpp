#include <gtest/gtest.h>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::test_randn;

TEST(Add, BroadcastingValues) {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(all_close(add(a, tensor({10, 20, 30})), {11, 22, 33, 14, 25, 36}));
  EXPECT_TRUE(all_close(add(a, tensor({100, 200}, {2, 1})), {101, 102, 103, 204, 205, 206}));
  EXPECT_TRUE(all_close(add(a, full({}, 1.0)), {2, 3, 4, 5, 6, 7}));
  Tensor c = add(tensor({1, 2}, {2, 1}), tensor({10, 20, 30}, {1, 3}));
  EXPECT_EQ(c.shape(), Shape({2, 3}));
  EXPECT_TRUE(all_close(c, {11, 21, 31, 12, 22, 32}));
}

TEST(Add, Gradients) {
  auto f = [](const std::vector<Tensor>& x) { return add(x[0], x[1]); };
  EXPECT_TRUE(gradcheck(f, {test_randn({3, 5}, 1), test_randn({3, 5}, 2)}));
  EXPECT_TRUE(gradcheck(f, {test_randn({3, 5}, 1), test_randn({5}, 2)}));
  EXPECT_TRUE(gradcheck(f, {test_randn({2, 1, 5}, 1), test_randn({3, 1}, 2)}));
  EXPECT_TRUE(gradcheck(f, {test_randn({7}, 1), test_randn({}, 2)}));
}

TEST(Add, ShapeMismatchNamesBothShapes) {
  try {
    add(zeros({2, 3}), zeros({4}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("add"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4]"), std::string::npos) << m;
  }
  EXPECT_THROW(add(zeros({2}), zeros({2}, DType::f64)), DTypeError);
}

}  // namespace
}  // namespace tessera
