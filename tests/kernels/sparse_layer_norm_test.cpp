// sparse_layer_norm (and sparse_layer_norm_backward through it): closed-form values, a plain
// reference on random data, equality with layer_norm for one segment, fused ReLU, gradients for
// segments {1, 2, 4} with and without ReLU and affine parameters, statistics, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

// Plain reference: x [rows, C] as a vector; gamma/beta empty for none; two-pass in double.
std::vector<double> reference(const std::vector<double>& x, int64_t c, int64_t segments,
                              const std::vector<double>& gamma, const std::vector<double>& beta, double eps,
                              bool relu) {
  const int64_t rows = static_cast<int64_t>(x.size()) / c, gs = c / segments;
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t s = 0; s < segments; ++s) {
      const int64_t off = r * c + s * gs;
      double mu = 0, var = 0;
      for (int64_t j = 0; j < gs; ++j) mu += x[off + j] / gs;
      for (int64_t j = 0; j < gs; ++j) var += (x[off + j] - mu) * (x[off + j] - mu) / gs;
      for (int64_t j = 0; j < gs; ++j) {
        double z = (x[off + j] - mu) / std::sqrt(var + eps);
        if (!gamma.empty()) z *= gamma[s * gs + j];
        if (!beta.empty()) z += beta[s * gs + j];
        y[off + j] = relu ? std::max(z, 0.0) : z;
      }
    }
  }
  return y;
}

TEST(SparseLayerNorm, HandValues) {
  // Row [1, 2 | 3, 4]: both segments have var 0.25; row [2, 6 | -1, 5]: var 4 and var 9.
  const double eps = 1e-5;
  Tensor x = tensor({1, 2, 3, 4, 2, 6, -1, 5}, {2, 4}, DType::f64);
  const double a = 0.5 / std::sqrt(0.25 + eps), b = 2 / std::sqrt(4 + eps), c = 3 / std::sqrt(9 + eps);
  EXPECT_TRUE(all_close(sparse_layer_norm(x, 2), {-a, a, -a, a, -b, b, -c, c}, 1e-12));
  // Affine: z = xhat·gamma + beta with gamma/beta indexed over the whole row.
  Tensor gamma = tensor({1, 2, -1, 0.5}, DType::f64), beta = tensor({0, 1, 2, -3}, DType::f64);
  EXPECT_TRUE(all_close(sparse_layer_norm(x, 2, gamma, beta),
                        {-a, 2 * a + 1, a + 2, 0.5 * a - 3, -b, 2 * b + 1, c + 2, 0.5 * c - 3}, 1e-12));
  // Fused ReLU after the affine map.
  EXPECT_TRUE(all_close(sparse_layer_norm(x, 2, gamma, beta, eps, true),
                        {0, 2 * a + 1, a + 2, 0, 0, 2 * b + 1, c + 2, 0}, 1e-12));
  EXPECT_TRUE(all_close(sparse_layer_norm(x, 2, Tensor(), beta, 0.0, true), {0, 2, 1, 0, 0, 2, 1, 0}, 1e-12));
  // Statistics: [rows, segments] = x's shape with the last dim replaced by segments.
  std::vector<Tensor> out = call<op::SparseLayerNorm>({2, eps, false, false, false}, {x});
  EXPECT_EQ(out[1].shape(), Shape({2, 2}));
  EXPECT_EQ(out[1].dtype(), DType::f64);
  EXPECT_TRUE(all_close(out[1], {1.5, 3.5, 4, 2}, 1e-12));
  EXPECT_TRUE(all_close(out[2], {2 * a, 2 * a, b / 2, c / 3}, 1e-12));
}

TEST(SparseLayerNorm, MatchesReferenceOnRandomData) {
  // Odd row counts, G = 3 (odd), 3-D x; values against the plain double reference.
  for (int64_t segments : {1, 2, 4}) {
    const int64_t c = segments == 1 ? 7 : 3 * segments;  // G = 7, 3, 3
    Tensor x = test_randn({5, 3, c}, 20 + segments), gamma = test_randn({c}, 30), beta = test_randn({c}, 31);
    const std::vector<double> xv = x.to_vector<double>(), gv = gamma.to_vector<double>(),
                              bv = beta.to_vector<double>();
    for (bool relu : {false, true}) {
      Tensor y = sparse_layer_norm(x, segments, gamma, beta, 1e-5, relu);
      EXPECT_EQ(y.shape(), x.shape());
      EXPECT_TRUE(all_close(y, reference(xv, c, segments, gv, bv, 1e-5, relu), 1e-12, 1e-12))
          << "segments " << segments << " relu " << relu;
      EXPECT_TRUE(all_close(sparse_layer_norm(x, segments, Tensor(), Tensor(), 1e-3, relu),
                            reference(xv, c, segments, {}, {}, 1e-3, relu), 1e-12, 1e-12));
    }
  }
}

TEST(SparseLayerNorm, OneSegmentEqualsLayerNormExactly) {
  for (DType t : {DType::f32, DType::f64}) {
    Tensor x = test_randn({3, 5, 37}, 40, t), gamma = test_randn({37}, 41, t), beta = test_randn({37}, 42, t);
    std::vector<Tensor> a = call<op::SparseLayerNorm>({1, 1e-5, false, true, true}, {x, gamma, beta});
    std::vector<Tensor> b = call<op::LayerNorm>({1e-5, true, true}, {x, gamma, beta});
    // y bit for bit; the statistics too, shaped [..., 1] (segments) where layer_norm's are [...].
    EXPECT_EQ(a[0].shape(), b[0].shape());
    EXPECT_EQ(a[1].shape(), Shape({3, 5, 1}));
    for (int k = 0; k < 3; ++k)
      EXPECT_EQ(a[k].to_vector<double>(), b[k].to_vector<double>()) << "output " << k << " dtype " << t;
    EXPECT_EQ(sparse_layer_norm(x, 1).to_vector<double>(), layer_norm(x).to_vector<double>());
    EXPECT_EQ(sparse_layer_norm(x, 1, Tensor(), beta, 0.0).to_vector<double>(),
              layer_norm(x, Tensor(), beta, 0.0).to_vector<double>());
  }
  // Gradients agree with layer_norm's (different kernels, same math).
  Tensor g = test_randn({7, 9}, 43);
  std::vector<Tensor> p, q;
  for (auto* out : {&p, &q}) {
    Tensor x = test_randn({7, 9}, 44).requires_grad_(), gamma = test_randn({9}, 45).requires_grad_(),
           beta = test_randn({9}, 46).requires_grad_();
    Tensor y = out == &p ? sparse_layer_norm(x, 1, gamma, beta) : layer_norm(x, gamma, beta);
    y.backward(g);
    *out = {x.grad(), gamma.grad(), beta.grad()};
  }
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(all_close(p[k], q[k], 1e-12, 1e-12)) << "gradient " << k;
}

TEST(SparseLayerNorm, SegmentsAreIndependentLayerNorms) {
  // Without affine, S segments of G features = layer_norm over x viewed as [rows, S, G].
  Tensor x = test_randn({9, 4 * 5}, 50);
  Tensor ref = reshape(layer_norm(reshape(x, {9, 4, 5})), {9, 20});
  EXPECT_EQ(sparse_layer_norm(x, 4).to_vector<double>(), ref.to_vector<double>());
  // Fused ReLU = relu of the unfused result.
  Tensor gamma = test_randn({20}, 51), beta = test_randn({20}, 52);
  EXPECT_TRUE(all_close(sparse_layer_norm(x, 4, gamma, beta, 1e-5, true),
                        relu(sparse_layer_norm(x, 4, gamma, beta, 1e-5, false)), 1e-15, 0));
}

TEST(SparseLayerNorm, F32MatchesF64) {
  auto to_f32 = [](const Tensor& t) { return from_vector(t.to_vector<float>(), t.shape()); };
  auto to_f64 = [](const Tensor& t) { return from_vector(t.to_vector<double>(), t.shape()); };
  Tensor x = to_f32(add(test_randn({33, 96}, 60), full({}, 1e3, DType::f64)));
  Tensor g = to_f32(test_randn({96}, 61)), b = to_f32(test_randn({96}, 62));
  Tensor y = sparse_layer_norm(x, 3, g, b, 1e-5, true);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_TRUE(all_close(y, sparse_layer_norm(to_f64(x), 3, to_f64(g), to_f64(b), 1e-5, true), 1e-4, 1e-4));
}

TEST(SparseLayerNorm, HalfInputsComputeInF32) {
  // bf16 x/gamma: y in bf16, statistics in f32, within bf16 rounding of the f32 result.
  auto bf = [](const Tensor& t) { return from_vector(t.to_vector<float>(), t.shape(), DType::bf16); };
  auto f32 = [](const Tensor& t) { return from_vector(t.to_vector<float>(), t.shape()); };
  Tensor x = bf(test_randn({3, 32}, 63, DType::f32)), g = bf(test_randn({32}, 64, DType::f32));
  std::vector<Tensor> out = call<op::SparseLayerNorm>({4, 1e-5, true, true, false}, {x, g});
  EXPECT_EQ(out[0].dtype(), DType::bf16);
  EXPECT_EQ(out[1].dtype(), DType::f32);
  EXPECT_TRUE(all_close(out[0], sparse_layer_norm(f32(x), 4, f32(g), Tensor(), 1e-5, true), 1e-2, 1e-2));
}

// Smallest |z| (pre-ReLU value) of the forward: ReLU gradchecks need it away from the kink.
double min_abs_pre_relu(const Tensor& x, int64_t segments, const Tensor& gamma, const Tensor& beta) {
  std::vector<double> z = sparse_layer_norm(x, segments, gamma, beta).to_vector<double>();
  double m = INFINITY;
  for (double v : z) m = std::min(m, std::abs(v));
  return m;
}

TEST(SparseLayerNorm, Gradients) {
  struct Case {
    Shape x;
    int64_t segments;
  };
  // Odd row counts (3, 5), a 3-D input, odd segment sizes (G = 3, 5).
  const std::vector<Case> cases{{{3, 8}, 1}, {{5, 12}, 2}, {{3, 20}, 4}, {{2, 3, 12}, 4}, {{5, 10}, 2}};
  for (const Case& k : cases) {
    const int64_t c = k.x[-1], s = k.segments;
    Tensor x = test_randn(k.x, 70 + c);
    Tensor gamma = test_rand({c}, 0.5, 1.5, 71), beta = test_rand({c}, -0.4, 0.4, 72);
    for (bool relu : {false, true}) {
      if (relu) {
        // z = xhat·gamma + beta with these draws stays ≥ 1e-3 from 0 (checked, not assumed).
        ASSERT_GT(min_abs_pre_relu(x, s, gamma, beta), 1e-3) << k.x;
        ASSERT_GT(min_abs_pre_relu(x, s, gamma, Tensor()), 1e-3) << k.x;
        ASSERT_GT(min_abs_pre_relu(x, s, Tensor(), beta), 1e-3) << k.x;
        ASSERT_GT(min_abs_pre_relu(x, s, Tensor(), Tensor()), 1e-3) << k.x;
      }
      using V = std::vector<Tensor>;
      auto affine = [=](const V& v) { return sparse_layer_norm(v[0], s, v[1], v[2], 1e-5, relu); };
      auto plain = [=](const V& v) { return sparse_layer_norm(v[0], s, Tensor(), Tensor(), 1e-5, relu); };
      auto scale = [=](const V& v) { return sparse_layer_norm(v[0], s, v[1], Tensor(), 1e-5, relu); };
      auto shift = [=](const V& v) { return sparse_layer_norm(v[0], s, Tensor(), v[1], 1e-3, relu); };
      EXPECT_TRUE(gradcheck(affine, {x, gamma, beta})) << k.x << " segments " << s << " relu " << relu;
      EXPECT_TRUE(gradcheck(plain, {x})) << k.x << " segments " << s << " relu " << relu;
      EXPECT_TRUE(gradcheck(scale, {x, gamma})) << k.x << " segments " << s << " relu " << relu;
      EXPECT_TRUE(gradcheck(shift, {x, beta})) << k.x << " segments " << s << " relu " << relu;
    }
  }
}

TEST(SparseLayerNorm, BackwardParameterGradients) {
  // Parallel-sized (row blocks exercised): dgamma = sum_rows(gz·xhat), dbeta = sum_rows(gz),
  // gz = g·[y > 0]; reference in plain loops; deterministic across calls.
  const int64_t rows = 200, c = 256, segments = 8, gs = c / segments;
  Tensor x = test_randn({rows, c}, 80), g = test_randn({rows, c}, 81), gamma = test_rand({c}, 0.5, 1.5, 82),
         beta = test_randn({c}, 83);
  std::vector<Tensor> fw = call<op::SparseLayerNorm>({segments, 1e-5, true, true, true}, {x, gamma, beta});
  std::vector<Tensor> d = sparse_layer_norm_backward(g, x, fw[1], fw[2], segments, fw[0], gamma);
  const std::vector<double> xv = x.to_vector<double>(), gv = g.to_vector<double>();
  const std::vector<double> yv = fw[0].to_vector<double>(), mv = fw[1].to_vector<double>(),
                            rv = fw[2].to_vector<double>();
  std::vector<double> dgamma(c, 0.0), dbeta(c, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < c; ++j) {
      const int64_t u = r * segments + j / gs, i = r * c + j;
      const double gz = yv[i] > 0 ? gv[i] : 0.0;
      dgamma[j] += gz * (xv[i] - mv[u]) * rv[u];
      dbeta[j] += gz;
    }
  EXPECT_TRUE(all_close(d[1], dgamma, 1e-10, 1e-10));
  EXPECT_TRUE(all_close(d[2], dbeta, 1e-10, 1e-10));
  // Same dx as autograd through the public function.
  Tensor xr = x.detach().clone().requires_grad_();
  sparse_layer_norm(xr, segments, gamma, beta, 1e-5, true).backward(g);
  EXPECT_TRUE(all_close(d[0], xr.grad(), 1e-12, 1e-12));
  std::vector<Tensor> again = sparse_layer_norm_backward(g, x, fw[1], fw[2], segments, fw[0], gamma);
  EXPECT_EQ(again[1].to_vector<double>(), d[1].to_vector<double>());
  EXPECT_EQ(again[0].to_vector<double>(), d[0].to_vector<double>());
}

TEST(SparseLayerNorm, SymbolicShapes) {
  std::vector<Tensor> out =
      call<op::SparseLayerNorm>({4, 1e-5, true, true, false}, {symbolic({2, 3, 16}), symbolic({16})});
  EXPECT_TRUE(out[0].is_symbolic());
  EXPECT_EQ(out[0].shape(), Shape({2, 3, 16}));
  EXPECT_EQ(out[1].shape(), Shape({2, 3, 4}));
  EXPECT_EQ(out[2].dtype(), DType::f32);
}

TEST(SparseLayerNorm, Errors) {
  Tensor x = zeros({2, 6});
  expect_error<ShapeError>([&] { sparse_layer_norm(x, 4); },
                           {"sparse_layer_norm", "f32[2, 6]", "segments (4)"});
  expect_error<ValueError>([&] { sparse_layer_norm(x, 0); }, {"sparse_layer_norm", "segments", "0", "[2, 6]"});
  expect_error<ShapeError>([&] { sparse_layer_norm(x, 2, zeros({4})); },
                           {"sparse_layer_norm", "gamma", "[4]", "[2, 6]"});
  expect_error<ShapeError>([&] { sparse_layer_norm(x, 3, Tensor(), zeros({6, 1})); },
                           {"sparse_layer_norm", "beta", "[6, 1]", "[2, 6]"});
  expect_error<DTypeError>([&] { sparse_layer_norm(x, 2, zeros({6}, DType::f64)); },
                           {"sparse_layer_norm", "f64[6]", "f32[2, 6]"});
  expect_error<DTypeError>([&] { sparse_layer_norm(zeros({2, 6}, DType::i32), 2); },
                           {"sparse_layer_norm", "i32"});
  expect_error<ShapeError>([&] { sparse_layer_norm(full({}, 1.0), 1); }, {"sparse_layer_norm", "[]"});
  EXPECT_THROW(sparse_layer_norm(zeros({3, 0}), 1), ShapeError);
  EXPECT_THROW(sparse_layer_norm(x, 2, Tensor(), Tensor(), -1.0), ValueError);
  std::vector<Tensor> st = call<op::SparseLayerNorm>({2, 1e-5, false, false, false}, {x});
  expect_error<ShapeError>([&] { sparse_layer_norm_backward(x, x, zeros({2}), st[2], 2); },
                           {"sparse_layer_norm_backward", "mean", "[2]", "[2, 2]"});
  expect_error<ShapeError>([&] { sparse_layer_norm_backward(x, x, st[1], st[2], 3); },
                           {"sparse_layer_norm_backward", "[2, 3]"});
  expect_error<ShapeError>([&] { sparse_layer_norm_backward(zeros({2, 5}), x, st[1], st[2], 2); },
                           {"sparse_layer_norm_backward", "g", "[2, 5]", "[2, 6]"});
  expect_error<ShapeError>([&] { sparse_layer_norm_backward(x, x, st[1], st[2], 2, zeros({6})); },
                           {"sparse_layer_norm_backward", "y", "[6]"});
}

}  // namespace
}  // namespace tessera
