// linear (y = x·W + b) on the CPU: values against matmul + add, gradients by central
// differences, the f32_output form (bf16/f16 x, W; f32 b, y), the public function's autocast and
// its argument checks.
#include <gtest/gtest.h>

#include "core/autocast.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
using testing::gradcheck;
using testing::test_randn;

TEST(Linear, HandComputed) {
  // x [2, 3] · W [3, 2] = [[58, 64], [139, 154]]; + b [10, -20].
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor w = tensor({7, 8, 9, 10, 11, 12}, {3, 2});
  Tensor b = tensor({10, -20}, {2});
  EXPECT_TRUE(all_close(linear(x, w, b), {68, 44, 149, 134}));
}

TEST(Linear, MatchesMatmulPlusBias) {
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor x = test_randn({37, 53}, 1, dt), w = test_randn({53, 29}, 2, dt), b = test_randn({29}, 3, dt);
    Tensor y = linear(x, w, b);
    EXPECT_EQ(y.shape(), Shape({37, 29}));
    EXPECT_EQ(y.dtype(), dt);
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    EXPECT_TRUE(all_close(y, add(matmul(x, w), b), tol, tol)) << dtype_name(dt);
  }
}

TEST(Linear, HalfInputsRoundOnce) {
  for (DType dt : {DType::bf16, DType::f16}) {
    Tensor x = test_randn({9, 17}, 4, dt), w = test_randn({17, 5}, 5, dt), b = test_randn({5}, 6, dt);
    Tensor y = linear(x, w, b);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_TRUE(all_close(y, add(matmul(cast(x, DType::f64), cast(w, DType::f64)), cast(b, DType::f64)), 1e-2, 1e-2))
        << dtype_name(dt);
  }
}

TEST(Linear, F32OutputEqualsMatmulF32OutputPlusBias) {
  for (DType dt : {DType::bf16, DType::f16}) {
    Tensor x = test_randn({11, 23}, 7, dt), w = test_randn({23, 13}, 8, dt), b = test_randn({13}, 9, DType::f32);
    Tensor y = call<op::Linear>({true}, {x, w, b})[0];
    EXPECT_EQ(y.dtype(), DType::f32);
    Tensor want = add(call<op::Matmul>({false, false, true}, {x, w})[0], b);
    EXPECT_TRUE(all_close(y, want, 1e-6, 1e-6)) << dtype_name(dt);
  }
}

TEST(Linear, EmptyInnerDimensionGivesTheBias) {
  Tensor y = linear(empty({3, 0}, DType::f32), empty({0, 2}, DType::f32), tensor({1.5, -2}, {2}, DType::f32));
  EXPECT_TRUE(all_close(y, {1.5, -2, 1.5, -2, 1.5, -2}));
  EXPECT_EQ(linear(empty({0, 4}, DType::f64), zeros({4, 3}, DType::f64), zeros({3}, DType::f64)).shape(), Shape({0, 3}));
}

TEST(Linear, WithoutBiasIsMatmul) {
  Tensor x = test_randn({4, 3}, 10), w = test_randn({3, 5}, 11);
  EXPECT_TRUE(all_close(linear(x, w, Tensor()), matmul(x, w), 0, 0));
}

TEST(Linear, Gradients) {
  Tensor x = test_randn({5, 4}, 12), w = test_randn({4, 3}, 13), b = test_randn({3}, 14);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); }, {x, w, b}));
}

TEST(Linear, F32OutputGradientsAreInTheInputsDtypes) {
  Tensor x = test_randn({6, 5}, 15, DType::bf16).requires_grad_();
  Tensor w = test_randn({5, 4}, 16, DType::bf16).requires_grad_();
  Tensor b = test_randn({4}, 17, DType::f32).requires_grad_();
  Tensor g = test_randn({6, 4}, 18, DType::f32);
  call<op::Linear>({true}, {x, w, b})[0].backward(g);
  EXPECT_EQ(x.grad().dtype(), DType::bf16);
  EXPECT_EQ(w.grad().dtype(), DType::bf16);
  EXPECT_EQ(b.grad().dtype(), DType::f32);
  const Tensor gh = cast(g, DType::bf16);
  EXPECT_TRUE(all_close(x.grad(), matmul(gh, w.detach(), false, true), 0, 0));
  EXPECT_TRUE(all_close(w.grad(), matmul(x.detach(), gh, true, false), 0, 0));
  EXPECT_TRUE(all_close(b.grad(), sum(g, 0), 0, 0));  // from the f32 gradient itself
}

TEST(Linear, AutocastMultipliesInTheLowDtypeAndAddsTheF32Bias) {
  Tensor x = test_randn({7, 6}, 19, DType::f32), w = test_randn({6, 3}, 20, DType::f32);
  Tensor b = test_randn({3}, 21, DType::f32);
  for (DType low : {DType::bf16, DType::f16}) {
    autocast::Guard amp(low);
    Tensor y = linear(x, w, b);
    EXPECT_EQ(y.dtype(), DType::f32);
    Tensor want = call<op::Linear>({true}, {cast(x, low), cast(w, low), b})[0];
    EXPECT_TRUE(all_close(y, want, 0, 0)) << dtype_name(low);
  }
  // f64 is left alone.
  autocast::Guard amp(DType::bf16);
  Tensor x64 = test_randn({2, 3}, 22), w64 = test_randn({3, 2}, 23), b64 = test_randn({2}, 24);
  EXPECT_EQ(linear(x64, w64, b64).dtype(), DType::f64);
}

// linear(x, W, b, low) under autocast: y in the low dtype, bitwise cast(linear(x, W, b), low) (the
// f32 sums plus the f32 b, rounded once), with the same dx, dW (f32) and db (f32, the column sums
// of the low-dtype dy) as that formulation; outside autocast `out` must be what linear gives.
TEST(Linear, AutocastLowOutputIsTheF32OutputRoundedOnce) {
  const Tensor x = test_randn({9, 6}, 25, DType::f32), w0 = test_randn({6, 5}, 26, DType::f32);
  const Tensor b0 = test_randn({5}, 27, DType::f32), g = test_randn({9, 5}, 28, DType::f32);
  for (DType low : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(low));
    Tensor x1 = x.clone().requires_grad_(), w1 = w0.clone().requires_grad_(), b1 = b0.clone().requires_grad_();
    Tensor x2 = x.clone().requires_grad_(), w2 = w0.clone().requires_grad_(), b2 = b0.clone().requires_grad_();
    Tensor y1, y2;
    {
      autocast::Guard amp(low);
      y1 = linear(x1, w1, b1, low);
      y2 = cast(linear(x2, w2, b2), low);
    }
    ASSERT_EQ(y1.dtype(), low);
    EXPECT_TRUE(all_close(y1, y2, 0, 0));
    y1.backward(cast(g, low));
    y2.backward(cast(g, low));
    EXPECT_EQ(w1.grad().dtype(), DType::f32);
    EXPECT_EQ(b1.grad().dtype(), DType::f32);
    EXPECT_TRUE(all_close(x1.grad(), x2.grad(), 0, 0));
    EXPECT_TRUE(all_close(w1.grad(), w2.grad(), 0, 0));
    EXPECT_TRUE(all_close(b1.grad(), b2.grad(), 0, 0));
    EXPECT_TRUE(all_close(b1.grad(), sum(cast(cast(g, low), DType::f32), 0), 0, 0));
    {
      autocast::Guard amp(low);  // no bias: matmul of the low operands
      EXPECT_TRUE(all_close(linear(x, w0, Tensor(), low), cast(matmul(x, w0), low), 0, 0));
    }
  }
  EXPECT_EQ(linear(x, w0, b0, DType::f32).dtype(), DType::f32);  // what linear gives: allowed
  expect_error<DTypeError>([&] { linear(x, w0, b0, DType::bf16); }, {"linear", "bf16", "autocast"});
  // f32_bias: bf16/f16 x, W and y with an f32 b, not with f32_output
  const Tensor xh = cast(x, DType::bf16), wh = cast(w0, DType::bf16);
  EXPECT_EQ(call<op::Linear>({false, true}, {xh, wh, b0})[0].dtype(), DType::bf16);
  expect_error<DTypeError>([&] { call<op::Linear>({false, true}, {xh, wh, cast(b0, DType::bf16)}); },
                           {"linear", "b", "f32"});
  expect_error<DTypeError>([&] { call<op::Linear>({false, true}, {x, w0, b0}); }, {"linear", "f32 bias"});
  expect_error<DTypeError>([&] { call<op::Linear>({true, true}, {xh, wh, b0}); }, {"linear", "f32 output"});
}

TEST(Linear, ErrorsNameTheOpAndTheShapes) {
  expect_error<ShapeError>([] { linear(zeros({2, 3}), zeros({4, 5}), zeros({5})); }, {"linear", "[2, 3]", "[4, 5]"});
  expect_error<ShapeError>([] { linear(zeros({2, 3}), zeros({3, 5}), zeros({4})); }, {"linear", "[3, 5]", "[4]"});
  expect_error<ShapeError>([] { linear(zeros({2, 2, 3}), zeros({3, 5}), zeros({5})); }, {"linear", "[2, 2, 3]"});
  expect_error<ShapeError>([] { linear(zeros({2, 3}), zeros({3, 5}), zeros({1, 5})); }, {"linear", "[1, 5]"});
  expect_error<DTypeError>([] { linear(zeros({2, 3}), zeros({3, 5}, DType::f64), zeros({5})); }, {"linear", "f64"});
  expect_error<DTypeError>([] { linear(zeros({2, 3}), zeros({3, 5}), zeros({5}, DType::f64)); }, {"linear", "b"});
  // f32_output needs bf16/f16 x and W, and then an f32 b.
  expect_error<DTypeError>([] { call<op::Linear>({true}, {zeros({2, 3}), zeros({3, 5}), zeros({5})}); },
                           {"linear", "f32 output"});
  expect_error<DTypeError>(
      [] { call<op::Linear>({true}, {zeros({2, 3}, DType::bf16), zeros({3, 5}, DType::bf16), zeros({5}, DType::bf16)}); },
      {"linear", "b", "f32"});
  expect_error<DTypeError>([] { linear(zeros({2, 3}, DType::i32), zeros({3, 5}, DType::i32), zeros({5}, DType::i32)); },
                           {"linear"});
}

}  // namespace
}  // namespace tessera
