#include <gtest/gtest.h>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::test_randn;

// Plain triple loop: the reference.
std::vector<double> ref_matmul(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t n,
                               int64_t k, bool ta, bool tb) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        c[i * n + j] += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
  return c;
}

TEST(Matmul, HandComputed) {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = tensor({7, 8, 9, 10, 11, 12}, {3, 2});
  EXPECT_TRUE(all_close(matmul(a, b), {58, 64, 139, 154}));
}

TEST(Matmul, AllTransposeFlagsMatchReference) {
  const int64_t m = 5, n = 7, k = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Tensor a = test_randn(ta ? Shape{k, m} : Shape{m, k}, 1);
      Tensor b = test_randn(tb ? Shape{n, k} : Shape{k, n}, 2);
      Tensor c = matmul(a, b, ta, tb);
      EXPECT_EQ(c.shape(), Shape({m, n}));
      EXPECT_TRUE(all_close(c, ref_matmul(a.to_vector<double>(), b.to_vector<double>(), m, n, k, ta, tb), 1e-12, 1e-12));
    }
}

TEST(Matmul, BatchedMatchesPerBatch) {
  Tensor a = test_randn({4, 3, 5}, 3), b = test_randn({4, 5, 2}, 4);
  Tensor c = matmul(a, b);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), cv = c.to_vector<double>();
  for (int i = 0; i < 4; ++i) {
    std::vector<double> ai(av.begin() + i * 15, av.begin() + (i + 1) * 15), bi(bv.begin() + i * 10, bv.begin() + (i + 1) * 10);
    std::vector<double> ci = ref_matmul(ai, bi, 3, 2, 5, false, false);
    for (int j = 0; j < 6; ++j) EXPECT_NEAR(cv[i * 6 + j], ci[j], 1e-12);
  }
}

TEST(Matmul, F32AndBf16) {
  Tensor a = test_randn({8, 16}, 5, DType::f32), b = test_randn({16, 4}, 6, DType::f32);
  std::vector<double> ref = ref_matmul(a.to_vector<double>(), b.to_vector<double>(), 8, 4, 16, false, false);
  EXPECT_TRUE(all_close(matmul(a, b), ref, 1e-5, 1e-5));
  Tensor ah = test_randn({8, 16}, 5, DType::bf16), bh = test_randn({16, 4}, 6, DType::bf16);
  Tensor ch = matmul(ah, bh);
  EXPECT_EQ(ch.dtype(), DType::bf16);
  std::vector<double> refh = ref_matmul(ah.to_vector<double>(), bh.to_vector<double>(), 8, 4, 16, false, false);
  EXPECT_TRUE(all_close(ch, refh, 1e-2, 1e-2));
}

TEST(Matmul, Gradients) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Tensor a = test_randn(ta ? Shape{3, 4} : Shape{4, 3}, 7), b = test_randn(tb ? Shape{5, 3} : Shape{3, 5}, 8);
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& x) { return matmul(x[0], x[1], ta, tb); }, {a, b}))
          << "ta=" << ta << " tb=" << tb;
      Tensor a3 = test_randn(ta ? Shape{2, 3, 4} : Shape{2, 4, 3}, 9), b3 = test_randn(tb ? Shape{2, 5, 3} : Shape{2, 3, 5}, 10);
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& x) { return matmul(x[0], x[1], ta, tb); }, {a3, b3}))
          << "batched ta=" << ta << " tb=" << tb;
    }
}

TEST(Matmul, ShapeErrorNamesBothShapes) {
  try {
    matmul(zeros({2, 3}), zeros({4, 5}));
    FAIL();
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("matmul"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 5]"), std::string::npos) << m;
  }
  EXPECT_THROW(matmul(zeros({2, 3}), zeros({3, 2}, DType::f64)), DTypeError);
  EXPECT_THROW(matmul(zeros({2, 2, 3}), zeros({3, 3, 2})), ShapeError);
}

}  // namespace
}  // namespace tessera
