#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
using testing::gradcheck;
using testing::test_randn;

// Hand reference of one LSTM step: returns h and c as flat [N*H] vectors.
void reference(const std::vector<double>& pre, const std::vector<double>& c_prev, int64_t n, int64_t hs,
               double fb, std::vector<double>& h, std::vector<double>& c) {
  auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  h.assign(n * hs, 0.0);
  c.assign(n * hs, 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < hs; ++j) {
      const double* p = pre.data() + r * 4 * hs;
      const double i = sig(p[j]), f = sig(p[hs + j] + fb), o = sig(p[2 * hs + j]),
                   u = std::tanh(p[3 * hs + j]);
      c[r * hs + j] = f * c_prev[r * hs + j] + i * u;
      h[r * hs + j] = o * std::tanh(c[r * hs + j]);
    }
}

TEST(LstmGates, ForwardMatchesHandReference) {
  for (DType dt : {DType::f64, DType::f32}) {
    const int64_t n = 5, hs = 7;
    Tensor pre = mul(test_randn({n, 4 * hs}, 3, dt), 2.0);
    Tensor c_prev = test_randn({n, hs}, 4, dt);
    auto [h, c] = lstm_gates(pre, c_prev, 1.0);
    EXPECT_EQ(h.shape(), Shape({n, hs}));
    EXPECT_EQ(c.dtype(), dt);
    std::vector<double> hr, cr;
    reference(pre.to_vector<double>(), c_prev.to_vector<double>(), n, hs, 1.0, hr, cr);
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    EXPECT_TRUE(all_close(h, hr, tol, tol));
    EXPECT_TRUE(all_close(c, cr, tol, tol));
  }
}

TEST(LstmGates, SmallHandValues) {
  // One row, H = 1: pre = (i, f, o, u) = (0, 0, 0, 0), forget_bias 0, c_prev 2:
  // i = f = o = 1/2, u = 0 -> c = 1, h = tanh(1)/2.
  auto [h, c] = lstm_gates(tensor({0, 0, 0, 0}, {1, 4}, DType::f64), tensor({2}, {1, 1}, DType::f64));
  EXPECT_TRUE(all_close(c, {1.0}));
  EXPECT_TRUE(all_close(h, {std::tanh(1.0) / 2}));
  // Saturated gates stay finite: σ(-1000) = 0, σ(1000) = 1.
  auto [h2, c2] =
      lstm_gates(tensor({1000, -1000, 1000, 1000}, {1, 4}, DType::f64), tensor({5}, {1, 1}, DType::f64));
  EXPECT_TRUE(all_close(c2, {1.0}));
  EXPECT_TRUE(all_close(h2, {std::tanh(1.0)}));
}

TEST(LstmGates, GradcheckBothOutputs) {
  const int64_t n = 3, hs = 5;
  for (double fb : {0.0, 1.0}) {
    EXPECT_TRUE(gradcheck([fb](const std::vector<Tensor>& x) { return lstm_gates(x[0], x[1], fb).first; },
                          {test_randn({n, 4 * hs}, 11), test_randn({n, hs}, 12)}));
    EXPECT_TRUE(gradcheck([fb](const std::vector<Tensor>& x) { return lstm_gates(x[0], x[1], fb).second; },
                          {test_randn({n, 4 * hs}, 13), test_randn({n, hs}, 14)}));
    // Both outputs together (dh and dc non-zero at once), as a recurrent step uses them.
    EXPECT_TRUE(gradcheck(
        [fb](const std::vector<Tensor>& x) {
          auto [h, c] = lstm_gates(x[0], x[1], fb);
          return concat({h, mul(c, c)}, 1);
        },
        {test_randn({n, 4 * hs}, 15), test_randn({n, hs}, 16)}));
  }
  // Two chained steps: the c_prev gradient flows through.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& x) {
        auto [h1, c1] = lstm_gates(x[0], x[2], 0.5);
        auto [h2, c2] = lstm_gates(x[1], c1, 0.5);
        return add(h2, mul(h1, c2));
      },
      {test_randn({2, 12}, 17), test_randn({2, 12}, 18), test_randn({2, 3}, 19)}));
}

TEST(LstmGates, BackwardOpValues) {
  // dc_prev = (dc + dh·o·(1 − tanh(c)²))·f checked against the closed form on one element.
  Tensor pre = tensor({0.3, -0.2, 0.7, 0.1}, {1, 4}, DType::f64), c_prev = tensor({0.4}, {1, 1}, DType::f64);
  Tensor pre_l = pre.clone().requires_grad_(), c_l = c_prev.clone().requires_grad_();
  auto [h, c] = lstm_gates(pre_l, c_l, 0.0);
  add(mul(h, 2.0), mul(c, 3.0)).backward(ones({1, 1}, DType::f64));
  auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  const double i = sig(0.3), f = sig(-0.2), o = sig(0.7), u = std::tanh(0.1), cv = f * 0.4 + i * u,
               tc = std::tanh(cv), dct = 3.0 + 2.0 * o * (1 - tc * tc);
  EXPECT_TRUE(all_close(c_l.grad(), {dct * f}, 1e-12));
  EXPECT_TRUE(all_close(
      pre_l.grad(),
      {dct * u * i * (1 - i), dct * 0.4 * f * (1 - f), 2.0 * tc * o * (1 - o), dct * i * (1 - u * u)},
      1e-12));
}

TEST(LstmGates, Errors) {
  expect_error<ShapeError>([] { lstm_gates(zeros({3, 10}), zeros({3, 2})); }, {"lstm_gates", "[3, 10]"});
  expect_error<ShapeError>(
      [] {
        lstm_gates(zeros({3, 8}), zeros({3, 3}));
      },
      {"lstm_gates", "c_prev", "[3, 3]", "[3, 2]"});
  expect_error<ShapeError>([] { lstm_gates(zeros({2, 3, 8}), zeros({3, 2})); }, {"lstm_gates", "[2, 3, 8]"});
  expect_error<DTypeError>(
      [] {
        lstm_gates(zeros({3, 8}), zeros({3, 2}, DType::f64));
      },
      {"lstm_gates", "f32", "f64"});
  expect_error<DTypeError>(
      [] {
        lstm_gates(zeros({3, 8}, DType::i32), zeros({3, 2}, DType::i32));
      },
      {"lstm_gates", "i32"});
  expect_error<ValueError>(
      [] {
        lstm_gates(zeros({3, 8}), zeros({3, 2}), NAN);
      },
      {"lstm_gates", "forget_bias"});
  expect_error<ShapeError>(
      [] {
        lstm_gates_backward(zeros({3, 2}), zeros({3, 3}), zeros({3, 8}), zeros({3, 2}), zeros({3, 2}));
      },
      {"lstm_gates_backward", "dc", "[3, 3]"});
}

TEST(LstmGates, SymbolicShapes) {
  auto [h, c] = lstm_gates(symbolic({6, 32}, DType::f32), symbolic({6, 8}, DType::f32));
  EXPECT_TRUE(h.is_symbolic());
  EXPECT_EQ(c.shape(), Shape({6, 8}));
}

}  // namespace
}  // namespace tessera
