// causal_softmax and causal_softmax_backward on the CPU: values against a masked softmax in
// double (S == T and S > T, several batch dims), exact zeros above the diagonal, stability,
// f64 gradient checks, the backward rule by hand, shape rule and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
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

// Causal softmax of x [rows, S] viewed as [..., T, S] in double: row r (query t = r mod T) sees keys
// s <= t + S − T.
std::vector<double> ref_causal_softmax(const std::vector<double>& x, int64_t T, int64_t S, double scale) {
  std::vector<double> y(x.size(), 0.0);
  const int64_t rows = static_cast<int64_t>(x.size()) / S;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = r % T + S - T + 1;
    double m = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t s = 0; s < n; ++s) m = std::max(m, scale * x[r * S + s]);
    for (int64_t s = 0; s < n; ++s) sum += std::exp(scale * x[r * S + s] - m);
    for (int64_t s = 0; s < n; ++s) y[r * S + s] = std::exp(scale * x[r * S + s] - m) / sum;
  }
  return y;
}

TEST(CausalSoftmax, HandValues) {
  // T = S = 2, scale 1: row 0 sees key 0 only -> [1, 0]; row 1: [0, ln 3] -> [1/4, 3/4].
  Tensor x = tensor({5, 7, 0, std::log(3.0)}, {2, 2}, DType::f64);
  EXPECT_TRUE(all_close(causal_softmax(x), {1, 0, 0.25, 0.75}, 1e-12));
  // T = 1, S = 3 (the last query sees all keys), scale 2: softmax(2·[0, 0.5·ln 2, 0]) = [1/4, 1/2, 1/4].
  Tensor z = tensor({0, 0.5 * std::log(2.0), 0}, {1, 3}, DType::f64);
  EXPECT_TRUE(all_close(causal_softmax(z, 2.0), {0.25, 0.5, 0.25}, 1e-12));
}

TEST(CausalSoftmax, MatchesMaskedSoftmax) {
  struct Case {
    Shape shape;
    double scale;
  };
  for (DType dt : {DType::f32, DType::f64}) {
    for (const Case& c : {Case{{7, 7}, 1.0}, Case{{3, 5, 9}, 0.37}, Case{{2, 3, 4, 11}, -1.5},
                          Case{{2, 1, 13}, 2.0}, Case{{4, 33, 33}, 0.125}, Case{{3, 65, 300}, 0.5}}) {
      SCOPED_TRACE(dtype_name(dt) + std::string(" ") + c.shape.str());
      const int64_t T = c.shape[-2], S = c.shape[-1];
      Tensor x = test_randn(c.shape, 3, dt);
      Tensor y = causal_softmax(x, c.scale);
      EXPECT_EQ(y.meta(), x.meta());
      const std::vector<double> want = ref_causal_softmax(x.to_vector<double>(), T, S, c.scale);
      EXPECT_TRUE(all_close(y, want, dt == DType::f64 ? 1e-12 : 1e-5, 1e-7));
      // Masked keys are exactly 0 and every row sums to 1.
      const std::vector<double> yv = y.to_vector<double>();
      for (size_t i = 0; i < yv.size(); ++i)
        if (want[i] == 0.0) {
          ASSERT_EQ(yv[i], 0.0) << "element " << i;
        }
      EXPECT_TRUE(all_close(sum(y, -1), std::vector<double>(static_cast<size_t>(y.numel() / S), 1.0), 1e-5));
    }
  }
}

TEST(CausalSoftmax, LargeScoresStayFinite) {
  // Row 1 of [[±1000, ...]]: shifted by its max, like softmax.
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = tensor({1000, -50, 9, 1000, 1001, 9, -1000, -1001, -1002}, {3, 3}, dt);
    std::vector<double> want = ref_causal_softmax({1000, -50, 9, 1000, 1001, 9, -1000, -1001, -1002}, 3, 3, 1.0);
    EXPECT_TRUE(all_close(causal_softmax(x), want, 1e-6, 1e-12));
  }
}

TEST(CausalSoftmax, Gradients) {
  for (const Shape& s : {Shape{5, 5}, Shape{2, 3, 4}, Shape{2, 2, 3, 6}, Shape{1, 1, 4}}) {
    for (double scale : {1.0, 0.3}) {
      SCOPED_TRACE(s.str() + " scale " + std::to_string(scale));
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& x) { return causal_softmax(x[0], scale); },
                            {test_randn(s, 5)}));
    }
  }
}

TEST(CausalSoftmax, BackwardRuleByHand) {
  // dx = scale·y·(g − Σ g·y) on visible keys, exactly 0 on masked ones whatever g holds there.
  const int64_t T = 3, S = 4;
  const double scale = 0.7;
  Tensor x = test_randn({2, T, S}, 8).requires_grad_();
  std::vector<double> gv = test_randn({2, T, S}, 9).to_vector<double>();
  for (int64_t r = 0; r < 2 * T; ++r)
    for (int64_t s = r % T + S - T + 1; s < S; ++s) gv[r * S + s] = 1e30;  // never read
  Tensor y = causal_softmax(x, scale);
  y.backward(from_vector(gv, {2, T, S}, DType::f64));
  const std::vector<double> yv = y.to_vector<double>();
  std::vector<double> want(yv.size(), 0.0);
  for (int64_t r = 0; r < 2 * T; ++r) {
    const int64_t n = r % T + S - T + 1;
    double d = 0;
    for (int64_t s = 0; s < n; ++s) d += gv[r * S + s] * yv[r * S + s];
    for (int64_t s = 0; s < n; ++s) want[r * S + s] = scale * yv[r * S + s] * (gv[r * S + s] - d);
  }
  EXPECT_TRUE(all_close(x.grad(), want, 1e-12, 1e-14));
  // f32 backward op directly.
  Tensor g32 = test_randn({4, 5, 7}, 10, DType::f32), y32 = causal_softmax(test_randn({4, 5, 7}, 11, DType::f32));
  Tensor dx = causal_softmax_backward(g32, y32, 2.0);
  Tensor dx64 = causal_softmax_backward(cast(g32, DType::f64), cast(y32, DType::f64), 2.0);
  EXPECT_TRUE(all_close(dx, dx64.to_vector<double>(), 1e-5, 1e-6));
}

TEST(CausalSoftmax, SymbolicAndHalfDtypes) {
  EXPECT_EQ(causal_softmax(symbolic({4, 9, 9}), 0.5).shape(), Shape({4, 9, 9}));
  EXPECT_EQ(causal_softmax(symbolic({2, 3, 5}, DType::bf16)).dtype(), DType::bf16);
  // bf16 on the CPU: computed in f32, one rounding.
  Tensor x = test_randn({3, 6, 6}, 12, DType::f32);
  Tensor y = causal_softmax(cast(x, DType::bf16), 0.5);
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(cast(y, DType::f32), ref_causal_softmax(x.to_vector<double>(), 6, 6, 0.5), 1e-2, 1e-3));
}

TEST(CausalSoftmax, Errors) {
  expect_error<ShapeError>([] { causal_softmax(zeros({5})); }, {"causal_softmax", "[5]", ">= 2 dims"});
  expect_error<ShapeError>([] { causal_softmax(zeros({2, 4, 3})); }, {"causal_softmax", "[2, 4, 3]", "T=4", "S=3"});
  expect_error<DTypeError>([] { causal_softmax(zeros({3, 3}, DType::i32)); }, {"causal_softmax", "i32"});
  expect_error<ValueError>([] { causal_softmax(zeros({3, 3}), std::nan("")); }, {"causal_softmax", "scale"});
  expect_error<ShapeError>([] { causal_softmax_backward(zeros({2, 3}), zeros({2, 4}), 1.0); },
                           {"causal_softmax_backward", "[2, 3]", "[2, 4]"});
  expect_error<DTypeError>([] { causal_softmax_backward(zeros({2, 3}), zeros({2, 3}, DType::f64), 1.0); },
                           {"causal_softmax_backward"});
}

}  // namespace
}  // namespace tessera
