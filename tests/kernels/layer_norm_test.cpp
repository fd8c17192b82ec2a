// layer_norm (and layer_norm_backward through it): values, statistics, stability, gradients
// with and without affine parameters, errors; a bf16/f16 y of f32 x and layer_norm_backward
// with its bf16/f16 gradient, bitwise against the explicit casts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
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
  std::vector<Tensor> out = call<op::LayerNorm>({eps, false, false}, {reshape(x, std::vector<int64_t>{2, 1, 4})});
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
  std::vector<Tensor> out = call<op::LayerNorm>({1e-5, true, false}, {bf(x), bf(g)});
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
  std::vector<Tensor> st = call<op::LayerNorm>({1e-5, false, false}, {x});
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
  std::vector<Tensor> st = call<op::LayerNorm>({1e-5, false, false}, {x});
  EXPECT_THROW(layer_norm_backward(zeros({2, 4}), x, st[1], st[2]), ShapeError);
  EXPECT_THROW(layer_norm_backward(x, x, zeros({5}), st[2]), ShapeError);
}

// Same dtype, shape and bytes.
::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want) {
  if (!(got.meta() == want.meta())) return ::testing::AssertionFailure() << got.meta() << " vs " << want.meta();
  if (std::memcmp(got.data_ptr(), want.data_ptr(), want.nbytes()) != 0)
    return ::testing::AssertionFailure() << "values of " << want.meta() << " differ";
  return ::testing::AssertionSuccess();
}

// The parameter combinations: none, gamma, beta, both (f32 [C], away from ones/zeros).
struct Params {
  Tensor gamma, beta;
  const char* name;
};
std::vector<Params> param_cases(int64_t c, uint64_t seed) {
  const Tensor g = test_rand({c}, 0.5, 1.5, seed, DType::f32), b = test_randn({c}, seed + 1, DType::f32);
  return {{Tensor(), Tensor(), "plain"}, {g, Tensor(), "gamma"}, {Tensor(), b, "beta"}, {g, b, "affine"}};
}

TEST(LayerNorm, NarrowedOutputIsTheCastOfTheF32Output) {
  uint64_t seed = 40;
  for (const Shape& s : {Shape{1, 1}, Shape{5, 7}, Shape{2, 3, 33}, Shape{200, 257}}) {
    const Tensor x = add(mul(test_randn(s, ++seed, DType::f32), 2.0), 0.5);
    for (const Params& p : param_cases(s[-1], seed += 2)) {
      const std::vector<Tensor> in = [&] {
        std::vector<Tensor> v{x};
        if (p.gamma.defined()) v.push_back(p.gamma);
        if (p.beta.defined()) v.push_back(p.beta);
        return v;
      }();
      const std::vector<Tensor> ref = call<op::LayerNorm>({1e-5, p.gamma.defined(), p.beta.defined()}, in);
      for (DType out : {DType::bf16, DType::f16}) {
        const std::vector<Tensor> got = call<op::LayerNorm>({1e-5, p.gamma.defined(), p.beta.defined(), out}, in);
        EXPECT_TRUE(same_bits(got[0], cast(ref[0], out))) << p.name << " " << out << " " << s;
        EXPECT_TRUE(same_bits(got[1], ref[1])) << "mean: " << p.name;  // statistics: f32 as before
        EXPECT_TRUE(same_bits(got[2], ref[2])) << "rstd: " << p.name;
        EXPECT_TRUE(same_bits(layer_norm(x, p.gamma, p.beta, 1e-5, out), got[0]));
      }
      EXPECT_TRUE(same_bits(layer_norm(x, p.gamma, p.beta, 1e-5, DType::f32), ref[0]));  // x's dtype
    }
  }
}

TEST(LayerNorm, BackwardReadsAHalfGradientOfF32InputAsItsWidening) {
  uint64_t seed = 60;
  for (const Shape& s : {Shape{1, 1}, Shape{5, 7}, Shape{2, 3, 33}, Shape{200, 257}}) {
    const Tensor x = test_randn(s, ++seed, DType::f32);
    const std::vector<Tensor> st = call<op::LayerNorm>({1e-5, false, false}, {x});
    const Tensor gamma = test_rand({s[-1]}, 0.5, 1.5, ++seed, DType::f32);
    for (DType gt : {DType::bf16, DType::f16})
      for (bool with_gamma : {false, true}) {
        const Tensor g = cast(test_randn(s, ++seed, DType::f32), gt);
        const Tensor gm = with_gamma ? gamma : Tensor();
        const std::vector<Tensor> got = layer_norm_backward(g, x, st[1], st[2], gm);
        const std::vector<Tensor> want = layer_norm_backward(cast(g, DType::f32), x, st[1], st[2], gm);
        for (int k = 0; k < 3; ++k) {
          EXPECT_EQ(got[k].dtype(), DType::f32);
          EXPECT_TRUE(same_bits(got[k], want[k]))
              << "output " << k << " " << gt << (with_gamma ? " gamma " : " ") << s;
        }
      }
  }
}

TEST(LayerNorm, GradientsThroughTheNarrowedOutputEqualThroughTheCast) {
  const Shape s{37, 129};
  for (DType out : {DType::bf16, DType::f16})
    for (const Params& p : param_cases(129, 70)) {
      auto leaf = [](const Tensor& t) { return t.defined() ? t.detach().clone().requires_grad_() : Tensor(); };
      const Tensor x0 = test_randn(s, 72, DType::f32);
      const Tensor w = cast(test_randn(s, 73, DType::f32), out);
      Tensor x1 = leaf(x0), g1 = leaf(p.gamma), b1 = leaf(p.beta);
      Tensor x2 = leaf(x0), g2 = leaf(p.gamma), b2 = leaf(p.beta);
      const Tensor y1 = layer_norm(x1, g1, b1, 1e-5, out), y2 = cast(layer_norm(x2, g2, b2), out);
      ASSERT_TRUE(same_bits(y1, y2)) << p.name;
      sum(cast(mul(y1, w), DType::f32)).backward();
      sum(cast(mul(y2, w), DType::f32)).backward();
      EXPECT_TRUE(same_bits(x1.grad(), x2.grad())) << "dx " << p.name << " " << out;
      if (p.gamma.defined()) {
        EXPECT_TRUE(same_bits(g1.grad(), g2.grad())) << "dgamma " << p.name << " " << out;
      }
      if (p.beta.defined()) {
        EXPECT_TRUE(same_bits(b1.grad(), b2.grad())) << "dbeta " << p.name << " " << out;
      }
    }
}

TEST(LayerNorm, OutputAndGradientDtypeErrors) {
  const Tensor x = zeros({2, 5});
  expect_error<DTypeError>([&] { layer_norm(cast(x, DType::bf16), Tensor(), Tensor(), 1e-5, DType::f32); },
                           {"layer_norm", "output dtype f32", "bf16[2, 5]"});
  expect_error<DTypeError>([&] { layer_norm(cast(x, DType::f64), Tensor(), Tensor(), 1e-5, DType::bf16); },
                           {"layer_norm", "output dtype bf16", "f64[2, 5]"});
  expect_error<DTypeError>([&] { layer_norm(x, Tensor(), Tensor(), 1e-5, DType::f64); }, {"layer_norm", "f64"});
  // gamma and beta stay in x's dtype, whatever y's is.
  expect_error<DTypeError>([&] { layer_norm(x, zeros({5}, DType::bf16), Tensor(), 1e-5, DType::bf16); },
                           {"layer_norm", "gamma", "bf16[5]"});
  const std::vector<Tensor> st = call<op::LayerNorm>({1e-5, false, false}, {x});
  expect_error<DTypeError>([&] { layer_norm_backward(cast(x, DType::f64), x, st[1], st[2]); },
                           {"layer_norm_backward", "f64[2, 5]", "f32[2, 5]"});
  const Tensor xb = cast(x, DType::bf16);
  const std::vector<Tensor> sb = call<op::LayerNorm>({1e-5, false, false}, {xb});
  expect_error<DTypeError>([&] { layer_norm_backward(x, xb, sb[1], sb[2]); },
                           {"layer_norm_backward", "f32[2, 5]", "bf16[2, 5]"});
  expect_error<ShapeError>([&] { layer_norm_backward(zeros({2, 4}, DType::bf16), x, st[1], st[2]); },
                           {"layer_norm_backward", "[2, 4]"});
}

}  // namespace
}  // namespace tessera
