// layer_norm (and layer_norm_backward through it): values, statistics, stability, gradients
// with and without affine parameters, errors.
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
using testing::test_rand;
using testing::test_randn;

void expect_message_has(const std::string& what, const std::vector<std::string>& parts) {
  for (const std::string& p : parts)
    EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
}

TEST(LayerNorm, HandValues) {
  // Row [1, 2, 3, 4]: mean 2.5, biased var 1.25; row [2, 2, 6, 6]: mean 4, var 4.
  const double eps = 1e-5;
  Tensor x = tensor({1, 2, 3, 4, 2, 2, 6, 6}, {2, 4}, DType::f64);
  const double r0 = 1 / std::sqrt(1.25 + eps), r1 = 1 / std::sqrt(4 + eps);
  EXPECT_TRUE(all_close(layer_norm(x),
                        {-1.5 * r0, -0.5 * r0, 0.5 * r0, 1.5 * r0, -2 * r1, -2 * r1, 2 * r1, 2 * r1}, 1e-12));
  Tensor gamma = tensor({1, 2, -1, 0.5}, DType::f64), beta = tensor({0, 1, 2, 3}, DType::f64);
  EXPECT_TRUE(all_close(
      layer_norm(x, gamma, beta),
      {-1.5 * r0, -1.0 * r0 + 1, -0.5 * r0 + 2, 0.75 * r0 + 3, -2 * r1, -4 * r1 + 1, -2 * r1 + 2, r1 + 3},
      1e-12));
  EXPECT_TRUE(all_close(layer_norm(x, gamma),
                        {-1.5 * r0, -1.0 * r0, -0.5 * r0, 0.75 * r0, -2 * r1, -4 * r1, -2 * r1, r1}, 1e-12));
  EXPECT_TRUE(all_close(layer_norm(x, Tensor(), beta, 0.0),
                        {-1.5 / std::sqrt(1.25), 1 - 0.5 / std::sqrt(1.25), 2 + 0.5 / std::sqrt(1.25),
                         3 + 1.5 / std::sqrt(1.25), -1, 0, 3, 4},
                        1e-12));
  // The op's extra outputs: per-row mean and rstd, shaped like x without its last dim.
  std::vector<Tensor> out = call<LayerNorm>({eps, false, false}, {reshape(x, std::vector<int64_t>{2, 1, 4})});
  EXPECT_EQ(out[1].shape(), Shape({2, 1}));
  EXPECT_TRUE(all_close(out[1], {2.5, 4}, 1e-12));
  EXPECT_TRUE(all_close(out[2], {r0, r1}, 1e-12));
}

TEST(LayerNorm, F32MatchesF64AndLargeOffsets) {
  // Rows with a large common offset: two-pass statistics in double keep f32 accurate.
  // The reference runs in f64 on the same (f32-rounded) values.
  auto to_f32 = [](const Tensor& t) { return from_vector(t.to_vector<float>(), t.shape()); };
  auto to_f64 = [](const Tensor& t) { return from_vector(t.to_vector<double>(), t.shape()); };
  Tensor x = to_f32(add(test_randn({37, 129}, 2), full({}, 1e4, DType::f64)));
  Tensor g = to_f32(test_randn({129}, 3)), b = to_f32(test_randn({129}, 4));
  Tensor y = layer_norm(x, g, b);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_TRUE(all_close(y, layer_norm(to_f64(x), to_f64(g), to_f64(b)), 1e-5, 1e-5));
  Tensor z = layer_norm(from_vector(std::vector<float>{1e4f, 1e4f + 1, 1e4f + 2}, {1, 3}));
  EXPECT_TRUE(all_close(z, {-std::sqrt(1.5), 0, std::sqrt(1.5)}, 1e-4, 1e-5));
}

TEST(LayerNorm, HalfInputsComputeInF32) {
  // bf16 x/gamma/beta: y in bf16, statistics in f32, values within bf16 rounding of the f32 result.
  Tensor x = test_randn({3, 33}, 16, DType::f32), g = test_randn({33}, 17, DType::f32);
  auto bf = [](const Tensor& t) { return from_vector(t.to_vector<float>(), t.shape(), DType::bf16); };
  std::vector<Tensor> out = call<LayerNorm>({1e-5, true, false}, {bf(x), bf(g)});
  EXPECT_EQ(out[0].dtype(), DType::bf16);
  EXPECT_EQ(out[1].dtype(), DType::f32);
  auto f32 = [](const Tensor& t) { return from_vector(t.to_vector<float>(), t.shape()); };
  Tensor ref = layer_norm(f32(bf(x)), f32(bf(g)));
  EXPECT_TRUE(all_close(out[0], ref, 1e-2, 1e-2));
}

TEST(LayerNorm, Gradients) {
  auto affine = [](const std::vector<Tensor>& x) { return layer_norm(x[0], x[1], x[2]); };
  auto plain = [](const std::vector<Tensor>& x) { return layer_norm(x[0]); };
  auto scale_only = [](const std::vector<Tensor>& x) { return layer_norm(x[0], x[1]); };
  auto shift_only = [](const std::vector<Tensor>& x) { return layer_norm(x[0], Tensor(), x[1], 1e-3); };
  EXPECT_TRUE(gradcheck(affine, {test_randn({3, 7}, 1), test_randn({7}, 2), test_randn({7}, 3)}));
  EXPECT_TRUE(gradcheck(affine, {test_randn({2, 3, 5}, 4), test_randn({5}, 5), test_randn({5}, 6)}));
  EXPECT_TRUE(gradcheck(plain, {test_randn({3, 7}, 7)}));
  EXPECT_TRUE(gradcheck(plain, {test_randn({5}, 8)}));
  EXPECT_TRUE(gradcheck(scale_only, {test_randn({2, 3, 5}, 9), test_randn({5}, 10)}));
  EXPECT_TRUE(gradcheck(shift_only, {test_randn({3, 7}, 11), test_randn({7}, 12)}));
}

TEST(LayerNorm, BackwardParameterGradients) {
  // dgamma = sum_rows g·xhat, dbeta = sum_rows g; parallel-sized so the row blocks are exercised.
  Tensor x = test_randn({200, 257}, 13), g = test_randn({200, 257}, 14),
         gamma = test_rand({257}, 0.5, 1.5, 15);
  std::vector<Tensor> st = call<LayerNorm>({1e-5, false, false}, {x});
  std::vector<Tensor> d = layer_norm_backward(g, x, st[1], st[2], gamma);
  Tensor xhat = layer_norm(x);
  EXPECT_TRUE(all_close(d[1], sum(mul(g, xhat), 0), 1e-10, 1e-10));
  EXPECT_TRUE(all_close(d[2], sum(g, 0), 1e-10, 1e-10));
  // Same dx as autograd through the public function, and deterministic across calls.
  Tensor xr = x.detach().clone().requires_grad_();
  layer_norm(xr, gamma).backward(g);
  EXPECT_TRUE(all_close(d[0], xr.grad(), 1e-12, 1e-12));
  std::vector<Tensor> again = layer_norm_backward(g, x, st[1], st[2], gamma);
  EXPECT_EQ(again[1].to_vector<double>(), d[1].to_vector<double>());
}

TEST(LayerNorm, Errors) {
  Tensor x = zeros({2, 5});
  try {
    layer_norm(x, zeros({4}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    expect_message_has(e.what(), {"layer_norm", "gamma", "[4]", "[2, 5]"});
  }
  try {
    layer_norm(x, Tensor(), zeros({5, 1}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    expect_message_has(e.what(), {"layer_norm", "beta", "[5, 1]", "[2, 5]"});
  }
  try {
    layer_norm(x, zeros({5}, DType::f64));
    FAIL() << "expected DTypeError";
  } catch (const DTypeError& e) {
    expect_message_has(e.what(), {"layer_norm", "f64[5]", "f32[2, 5]"});
  }
  EXPECT_THROW(layer_norm(zeros({2, 5}, DType::i32)), DTypeError);
  EXPECT_THROW(layer_norm(full({}, 1.0)), ShapeError);
  EXPECT_THROW(layer_norm(zeros({3, 0})), ShapeError);
  EXPECT_THROW(layer_norm(x, Tensor(), Tensor(), -1.0), ValueError);
  std::vector<Tensor> st = call<LayerNorm>({1e-5, false, false}, {x});
  EXPECT_THROW(layer_norm_backward(zeros({2, 4}), x, st[1], st[2]), ShapeError);
  EXPECT_THROW(layer_norm_backward(x, x, zeros({5}), st[2]), ShapeError);
}

}  // namespace
}  // namespace tessera
