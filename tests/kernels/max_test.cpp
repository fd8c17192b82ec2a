// max, min, argmax, argmin, max_backward: values against loops, the tie rule, NaN,
// f64 gradient checks on odd sizes (inputs without ties), errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
using testing::gradcheck;
using testing::test_randn;

// Max (or min) over `dim` of x [outer, n, inner] by a plain loop: values and first index.
void ref_extreme(const std::vector<double>& x, int64_t outer, int64_t n, int64_t inner, bool take_min,
                 std::vector<double>* vals, std::vector<int32_t>* idx) {
  vals->assign(outer * inner, 0);
  idx->assign(outer * inner, 0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      for (int64_t k = 1; k < n; ++k) {
        double v = x[(o * n + k) * inner + i], b = x[(o * n + best) * inner + i];
        if (take_min ? v < b : v > b) best = k;
      }
      (*vals)[o * inner + i] = x[(o * n + best) * inner + i];
      (*idx)[o * inner + i] = static_cast<int32_t>(best);
    }
}

TEST(Max, HandComputedAndFirstIndexOnTies) {
  Tensor x = tensor({1, 5, 3, 7, 2, 7}, {2, 3});
  EXPECT_TRUE(all_close(max(x, 1), {5, 7}));
  EXPECT_EQ(argmax(x, 1).to_vector<int32_t>(), (std::vector<int32_t>{1, 0}));  // 7 at 0 and 2: first
  EXPECT_TRUE(all_close(max(x, 0), {7, 5, 7}));
  EXPECT_EQ(argmax(x, 0).to_vector<int32_t>(), (std::vector<int32_t>{1, 0, 1}));
  EXPECT_EQ(argmax(x, -1, true).shape(), Shape({2, 1}));
  EXPECT_EQ(argmax(x, 0).dtype(), DType::i32);
  EXPECT_EQ(max(x, -1, true).shape(), Shape({2, 1}));
  Tensor all = max(x);
  EXPECT_EQ(all.dim(), 0);
  EXPECT_EQ(all.item<double>(), 7);
  EXPECT_EQ(argmax(x).item<int32_t>(), 3);
  EXPECT_TRUE(all_close(min(x, 1), {1, 2}));
  EXPECT_EQ(argmin(x, 0).to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 0}));
  EXPECT_EQ(min(x).item<double>(), 1);
}

TEST(Max, MatchesLoopEveryDimOddAndLargeSizes) {
  // The large shape runs the parallel paths (more than kParallelGrain elements).
  for (Shape s : {Shape{3, 7, 5}, Shape{5, 301, 71}}) {
    for (DType dt : {DType::f64, DType::f32}) {
      Tensor x = test_randn(s, 7, dt);
      std::vector<double> xv = x.to_vector<double>();
      for (int d = 0; d < 3; ++d) {
        for (bool take_min : {false, true}) {
          std::vector<double> vals;
          std::vector<int32_t> idx;
          ref_extreme(xv, s.prod(0, d), s[d], s.prod(d + 1, 3), take_min, &vals, &idx);
          EXPECT_TRUE(all_close(take_min ? min(x, d) : max(x, d), vals, 0, 0)) << s << " dim " << d;
          EXPECT_EQ((take_min ? argmin(x, d) : argmax(x, d)).to_vector<int32_t>(), idx) << s << " dim " << d;
        }
      }
    }
  }
}

TEST(Max, NaNWinsAndBf16) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = tensor({1, nan, 3, nan, 2, 9}, {2, 3}, DType::f64);
  std::vector<double> v = max(x, 1).to_vector<double>();
  EXPECT_TRUE(std::isnan(v[0]) && std::isnan(v[1]));
  EXPECT_EQ(argmax(x, 1).to_vector<int32_t>(), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(argmin(x, 1).to_vector<int32_t>(), (std::vector<int32_t>{1, 0}));
  Tensor h = tensor({0.5, -2, 4, 3.25}, {2, 2}, DType::bf16);
  Tensor m = max(h, 0);
  EXPECT_EQ(m.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(m, {4, 3.25}));
}

TEST(Max, Gradients) {
  // Normal samples: ties have probability zero.
  for (int d : {0, 1, 2, -1})
    for (bool keep : {false, true}) {
      EXPECT_TRUE(
          gradcheck([=](const std::vector<Tensor>& x) { return max(x[0], d, keep); }, {test_randn({3, 5, 7}, 2)}));
      EXPECT_TRUE(
          gradcheck([=](const std::vector<Tensor>& x) { return min(x[0], d, keep); }, {test_randn({3, 5, 7}, 3)}));
    }
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return max(x[0]); }, {test_randn({5, 3}, 4)}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return min(x[0]); }, {test_randn({9}, 5)}));
}

TEST(Max, TieGradientGoesToFirstPosition) {
  Tensor x = tensor({3, 1, 3, 2, 2, 0}, {2, 3}, DType::f64).requires_grad_();
  max(x, 1).backward(tensor({10, 20}, DType::f64));
  EXPECT_TRUE(all_close(x.grad(), {10, 0, 0, 20, 0, 0}));
  Tensor y = tensor({4, 4, 4}, DType::f64).requires_grad_();
  max(y).backward();
  EXPECT_TRUE(all_close(y.grad(), {1, 0, 0}));
}

TEST(Max, MaxBackwardScatters) {
  Tensor g = tensor({1.5, -2, 4}, DType::f64);
  Tensor idx = from_vector<int32_t>({2, 0, 1}, {3});
  // x shape [3, 3] reduced over dim 1: row o gets g[o] at column idx[o].
  EXPECT_TRUE(all_close(max_backward(g, idx, Shape{3, 3}, 1), {0, 0, 1.5, -2, 0, 0, 0, 4, 0}));
  // Over dim 0 with keepdim: column i gets g[i] at row idx[i].
  Tensor gk = reshape(g, std::vector<int64_t>{1, 3});
  Tensor ik = reshape(idx, std::vector<int64_t>{1, 3});
  EXPECT_TRUE(all_close(max_backward(gk, ik, Shape{3, 3}, 0), {0, -2, 0, 0, 0, 4, 1.5, 0, 0}));
}

TEST(Max, Errors) {
  Tensor x = test_randn({2, 3});
  expect_error<ShapeError>([&] { max(x, 2); }, {"max", "[2, 3]"});
  expect_error<ShapeError>([&] { min(x, -3); }, {"min", "[2, 3]"});
  expect_error<ShapeError>([&] { max(zeros({0, 4})); }, {"max", "[0, 4]"});
  expect_error<ShapeError>([&] { max(zeros({3, 0}), 1); }, {"max", "[3, 0]"});
  expect_error<DTypeError>([&] { max(arange(5), 0); }, {"max", "i32"});
  expect_error<ValueError>([&] { max_backward(tensor({1}), from_vector<int32_t>({3}, {1}), Shape{1, 3}, 1); },
                           {"max_backward", "index 3", "[1, 3]"});
  expect_error<ShapeError>([&] { max_backward(tensor({1, 2}), from_vector<int32_t>({0, 0}, {2}), Shape{3, 3}, 1); },
                           {"max_backward", "[3, 3]", "[2]"});
}

}  // namespace
}  // namespace tessera
