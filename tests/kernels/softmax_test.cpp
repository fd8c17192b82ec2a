// softmax, log_softmax (and log_softmax_backward through them): values, stability, gradients.
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

// softmax of each row of `x` (rows of length c), in double.
std::vector<double> ref_softmax(const std::vector<double>& x, int64_t c) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / c; ++r) {
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(x[r * c + j]);
    for (int64_t j = 0; j < c; ++j) y[r * c + j] = std::exp(x[r * c + j]) / s;
  }
  return y;
}

TEST(Softmax, HandValues) {
  // Row 0: [0, ln 3] -> [1/4, 3/4]; row 1: all equal -> 1/2 each.
  const double l3 = std::log(3.0);
  Tensor x = tensor({0, l3, 5, 5}, {2, 2}, DType::f64);
  EXPECT_TRUE(all_close(softmax(x), {0.25, 0.75, 0.5, 0.5}, 1e-12));
  EXPECT_TRUE(
      all_close(log_softmax(x), {std::log(0.25), std::log(0.75), std::log(0.5), std::log(0.5)}, 1e-12));
  // [1, 2, 3]: e^k / (e + e² + e³).
  Tensor z = tensor({1, 2, 3});
  EXPECT_TRUE(all_close(softmax(z), {0.09003057317038046, 0.24472847105479764, 0.6652409557748219}, 1e-6));
  EXPECT_TRUE(all_close(log_softmax(z), {-2.40760596444438, -1.40760596444438, -0.40760596444438}, 1e-6));
}

TEST(Softmax, RandomRowsMatchReference) {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = test_randn({5, 17}, 3, dt);
    std::vector<double> ref = ref_softmax(x.to_vector<double>(), 17);
    EXPECT_TRUE(all_close(softmax(x), ref, 1e-5));
    std::vector<double> lref(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) lref[i] = std::log(ref[i]);
    EXPECT_TRUE(all_close(log_softmax(x), lref, 1e-5, 1e-6));
  }
  // Big enough for the parallel path; every row sums to 1.
  Tensor big = test_randn({300, 129}, 4, DType::f32);
  Tensor rows = sum(softmax(big), -1);
  EXPECT_TRUE(all_close(rows, std::vector<double>(300, 1.0), 1e-5));
}

TEST(Softmax, LargeLogitsStayFinite) {
  // Shifting a row by a constant changes nothing: [1000, 1001, 1002] behaves like [0, 1, 2].
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = tensor({1000, 1001, 1002, -1000, -1001, -1002}, {2, 3}, dt);
    std::vector<double> p = ref_softmax({0, 1, 2, 0, -1, -2}, 3);
    EXPECT_TRUE(all_close(softmax(x), p, 1e-6));
    std::vector<double> lp(p.size());
    for (size_t i = 0; i < p.size(); ++i) lp[i] = std::log(p[i]);
    EXPECT_TRUE(all_close(log_softmax(x), lp, 1e-5, 1e-6));
  }
}

TEST(Softmax, Gradients) {
  auto sm = [](const std::vector<Tensor>& x) { return softmax(x[0]); };
  auto lsm = [](const std::vector<Tensor>& x) { return log_softmax(x[0]); };
  for (const Shape& s : {Shape{3, 7}, Shape{2, 3, 5}, Shape{6}}) {
    EXPECT_TRUE(gradcheck(sm, {test_randn(s, 5)}));
    EXPECT_TRUE(gradcheck(lsm, {test_randn(s, 6)}));
  }
  // log_softmax's fused backward equals g − softmax(x)·sum(g) by hand.
  Tensor x = test_randn({2, 3}, 7).requires_grad_();
  Tensor g = tensor({1, -2, 0.5, 3, 0, -1}, {2, 3}, DType::f64);
  log_softmax(x).backward(g);
  std::vector<double> p = ref_softmax(x.to_vector<double>(), 3), gv = g.to_vector<double>(), want(6);
  for (int r = 0; r < 2; ++r)
    for (int j = 0; j < 3; ++j)
      want[r * 3 + j] = gv[r * 3 + j] - p[r * 3 + j] * (gv[r * 3] + gv[r * 3 + 1] + gv[r * 3 + 2]);
  EXPECT_TRUE(all_close(x.grad(), want, 1e-12, 1e-12));
}

TEST(Softmax, Symbolic) {
  EXPECT_EQ(softmax(symbolic({4, 9})).shape(), Shape({4, 9}));
  EXPECT_EQ(log_softmax(symbolic({2, 3, 5}, DType::bf16)).dtype(), DType::bf16);
}

TEST(Softmax, Errors) {
  try {
    softmax(full({}, 1.0));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("softmax"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[]"), std::string::npos) << e.what();
  }
  try {
    log_softmax(zeros({2, 3}, DType::i32));
    FAIL() << "expected DTypeError";
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("log_softmax"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("i32"), std::string::npos) << e.what();
  }
  try {
    log_softmax_backward(zeros({2, 3}), zeros({3, 2}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3, 2]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
