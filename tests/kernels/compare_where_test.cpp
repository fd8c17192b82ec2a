// compare (eq/ne/lt/le/gt/ge), where and masked_fill: values with broadcasting, dtypes,
// f64 gradient checks through where/masked_fill (odd sizes, broadcasting), errors.
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

std::vector<int> u8s(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::u8);
  return t.to_vector<int>();
}

// A u8 mask of `shape` with about half the entries set (fixed seed).
Tensor random_mask(const Shape& shape, uint64_t seed) { return gt(test_randn(shape, seed), 0.0); }

TEST(CompareWhere, CompareTensorsBroadcast) {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = tensor({2, 2, 6});
  EXPECT_EQ(u8s(eq(a, b)), (std::vector<int>{0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(u8s(ne(a, b)), (std::vector<int>{1, 0, 1, 1, 1, 0}));
  EXPECT_EQ(u8s(lt(a, b)), (std::vector<int>{1, 0, 1, 0, 0, 0}));
  EXPECT_EQ(u8s(le(a, b)), (std::vector<int>{1, 1, 1, 0, 0, 1}));
  EXPECT_EQ(u8s(gt(a, b)), (std::vector<int>{0, 0, 0, 1, 1, 0}));
  EXPECT_EQ(u8s(ge(a, b)), (std::vector<int>{0, 1, 0, 1, 1, 1}));
  EXPECT_EQ(lt(a, b).shape(), (Shape{2, 3}));
  // Column against row: [3, 1] vs [4] -> [3, 4].
  Tensor col = tensor({1, 2, 3}, {3, 1}, DType::f64), row = tensor({0, 1, 2, 3}, DType::f64);
  EXPECT_EQ(u8s(ge(col, row)), (std::vector<int>{1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1}));
}

TEST(CompareWhere, CompareScalarAndDtypes) {
  Tensor x = tensor({-1.5, 0, 0.1, 2, 7}, {5});
  EXPECT_EQ(u8s(eq(x, 0.1)), (std::vector<int>{0, 0, 1, 0, 0}));  // scalar rounded to f32
  EXPECT_EQ(u8s(ne(x, 2.0)), (std::vector<int>{1, 1, 1, 0, 1}));
  EXPECT_EQ(u8s(lt(x, 0.0)), (std::vector<int>{1, 0, 0, 0, 0}));
  EXPECT_EQ(u8s(le(x, 0.0)), (std::vector<int>{1, 1, 0, 0, 0}));
  EXPECT_EQ(u8s(gt(x, 1.0)), (std::vector<int>{0, 0, 0, 1, 1}));
  EXPECT_EQ(u8s(ge(x, 2.0)), (std::vector<int>{0, 0, 0, 1, 1}));
  // Integers compare with the exact scalar: i32 {0..4} < 2.5.
  EXPECT_EQ(u8s(lt(arange(5), 2.5)), (std::vector<int>{1, 1, 1, 0, 0}));
  EXPECT_EQ(u8s(eq(arange(5), arange(5))), (std::vector<int>{1, 1, 1, 1, 1}));
  // u8 masks compare too (negating a mask), and bf16 goes through the widened path.
  EXPECT_EQ(u8s(eq(lt(x, 0.0), 0.0)), (std::vector<int>{0, 1, 1, 1, 1}));
  EXPECT_EQ(u8s(gt(cast(x, DType::bf16), cast(tensor({0}), DType::bf16))), (std::vector<int>{0, 0, 1, 1, 1}));
  // NaN compares unequal to everything.
  Tensor n = tensor({NAN, 1});
  EXPECT_EQ(u8s(eq(n, n)), (std::vector<int>{0, 1}));
  EXPECT_EQ(u8s(ne(n, n)), (std::vector<int>{1, 0}));
  EXPECT_EQ(u8s(ge(n, 0.0)), (std::vector<int>{0, 1}));
}

TEST(CompareWhere, CompareOddSizesAgainstReference) {
  Tensor a = test_randn({3, 7, 5}, 31), b = test_randn({7, 1}, 32);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<int> want(av.size());
  for (size_t i = 0; i < av.size(); ++i) want[i] = av[i] < bv[(i / 5) % 7];
  EXPECT_EQ(u8s(lt(a, b)), want);
}

TEST(CompareWhere, CompareIsNotDifferentiable) {
  Tensor x = test_randn({4}, 33).requires_grad_();
  Tensor m = lt(x, 0.0);
  EXPECT_FALSE(m.requires_grad());
  EXPECT_EQ(m.dtype(), DType::u8);
}

TEST(CompareWhere, WhereValuesBroadcast) {
  Tensor cond = tensor({1, 0, 1}, {3}, DType::u8);
  Tensor a = tensor({10, 20, 30, 40, 50, 60}, {2, 3});
  Tensor b = tensor({-1, -2}, {2, 1});
  Tensor y = where(cond, a, b);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_TRUE(all_close(y, {10, -1, 30, 40, -2, 60}));
  // All three broadcast: cond [2, 1], a [3], b scalar -> [2, 3].
  Tensor y2 = where(tensor({0, 1}, {2, 1}, DType::u8), tensor({1, 2, 3}), tensor({9}, Shape{}));
  EXPECT_TRUE(all_close(y2, {9, 9, 9, 1, 2, 3}));
  // Integer operands work too; leaky relu as a where.
  Tensor bi = from_vector(std::vector<int32_t>{7, 8, 9}, {3});
  EXPECT_EQ(where(cond, arange(3), bi).to_vector<int>(), (std::vector<int>{0, 8, 2}));
  Tensor x = tensor({-2, 3, -0.5});
  EXPECT_TRUE(all_close(where(gt(x, 0.0), x, mul(x, 0.1)), {-0.2, 3, -0.05}, 1e-6));
}

TEST(CompareWhere, WhereGradients) {
  struct Case {
    Shape c, a, b;
  };
  for (const Case& k : {Case{{3, 5}, {3, 5}, {3, 5}}, Case{{3, 1}, {5}, {3, 5}}, Case{{5}, {2, 3, 5}, {1}},
                        Case{{2, 1, 7}, {3, 1}, {1, 3, 7}}}) {
    Tensor cond = random_mask(k.c, 34);
    auto f = [cond](const std::vector<Tensor>& x) { return where(cond, x[0], x[1]); };
    EXPECT_TRUE(gradcheck(f, {test_randn(k.a, 35), test_randn(k.b, 36)})) << k.c << " " << k.a << " " << k.b;
  }
  // Hand check: gradients go to a where cond, to b elsewhere, summed over broadcast dims.
  Tensor a = tensor({1, 2}, DType::f64).requires_grad_(), b = tensor({5}, DType::f64).requires_grad_();
  Tensor cond = tensor({1, 0, 0, 1}, {2, 2}, DType::u8);
  sum(where(cond, a, b)).backward();
  EXPECT_TRUE(all_close(a.grad(), {1, 1}));
  EXPECT_TRUE(all_close(b.grad(), {2}));
}

TEST(CompareWhere, MaskedFillValuesAndGradients) {
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(all_close(masked_fill(x, tensor({0, 1, 0, 1, 0, 0}, {2, 3}, DType::u8), -7.5), {1, -7.5, 3, -7.5, 5, 6}));
  // Mask [3] broadcast over rows; -inf for attention-style masking.
  EXPECT_TRUE(all_close(masked_fill(x, tensor({1, 0, 0}, {3}, DType::u8), -INFINITY),
                        {-INFINITY, 2, 3, -INFINITY, 5, 6}));
  EXPECT_EQ(masked_fill(arange(4), tensor({0, 1, 1, 0}, DType::u8), 9.0).to_vector<int>(), (std::vector<int>{0, 9, 9, 3}));
  EXPECT_TRUE(all_close(masked_fill(cast(x, DType::bf16), tensor({1}, {1}, DType::u8), 0.5), {0.5, 0.5, 0.5, 0.5, 0.5, 0.5}));
  for (Shape ms : {Shape{3, 7}, Shape{7}, Shape{3, 1}, Shape{2, 1, 7}}) {
    Shape xs = ms.ndim() == 3 ? Shape{2, 3, 7} : Shape{3, 7};
    Tensor mask = random_mask(ms, 37);
    auto f = [mask](const std::vector<Tensor>& t) { return masked_fill(t[0], mask, 2.5); };
    EXPECT_TRUE(gradcheck(f, {test_randn(xs, 38)})) << ms;
  }
  Tensor xg = tensor({1, 2, 3}, DType::f64).requires_grad_();
  masked_fill(xg, tensor({0, 1, 0}, DType::u8), 4.0).backward(tensor({10, 20, 30}, DType::f64));
  EXPECT_TRUE(all_close(xg.grad(), {10, 0, 30}));
}

TEST(CompareWhere, LargeBroadcastMatchesReference) {
  // Above the OpenMP grain (32768 elements), odd sizes, every operand broadcast.
  const int64_t R = 67, C = 509;
  Tensor cond = random_mask({R, 1}, 39), a = test_randn({C}, 40), b = test_randn({R, C}, 41);
  Tensor cm = random_mask({C}, 42);
  const std::vector<int> cv = cond.to_vector<int>(), mv = cm.to_vector<int>();
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> want_where(R * C), want_fill(R * C);
  std::vector<int> want_lt(R * C);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      want_where[r * C + c] = cv[r] ? av[c] : bv[r * C + c];
      want_fill[r * C + c] = mv[c] ? -1.0 : bv[r * C + c];
      want_lt[r * C + c] = av[c] < bv[r * C + c];
    }
  EXPECT_TRUE(all_close(where(cond, a, b), want_where, 0, 0));
  EXPECT_TRUE(all_close(masked_fill(b, cm, -1.0), want_fill, 0, 0));
  EXPECT_EQ(u8s(lt(a, b)), want_lt);
}

TEST(CompareWhere, Errors) {
  try {
    lt(zeros({2, 3}), zeros({4}));
    FAIL() << "compare accepted shapes that do not broadcast";
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("compare"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4]"), std::string::npos) << m;
  }
  EXPECT_THROW(eq(zeros({2}), zeros({2}, DType::f64)), DTypeError);
  try {
    where(zeros({3}), zeros({3}), zeros({3}));
    FAIL() << "where accepted an f32 cond";
  } catch (const DTypeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("where"), std::string::npos) << m;
    EXPECT_NE(m.find("f32[3]"), std::string::npos) << m;
  }
  try {
    where(tensor({1, 0}, DType::u8), zeros({3}), zeros({3}));
    FAIL() << "where accepted shapes that do not broadcast";
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("where"), std::string::npos) << m;
    EXPECT_NE(m.find("u8[2]"), std::string::npos) << m;
    EXPECT_NE(m.find("f32[3]"), std::string::npos) << m;
  }
  EXPECT_THROW(where(tensor({1}, DType::u8), zeros({3}), zeros({3}, DType::f64)), DTypeError);
  try {
    masked_fill(zeros({2, 3}), tensor({1, 0, 1, 0}, {4}, DType::u8), 0.0);
    FAIL() << "masked_fill accepted a mask that does not broadcast";
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("masked_fill"), std::string::npos) << m;
    EXPECT_NE(m.find("u8[4]"), std::string::npos) << m;
    EXPECT_NE(m.find("f32[2, 3]"), std::string::npos) << m;
  }
  // A mask larger than x is not broadcast to x's shape.
  EXPECT_THROW(masked_fill(zeros({3}), tensor({1, 0, 1, 0, 1, 0}, {2, 3}, DType::u8), 0.0), ShapeError);
  EXPECT_THROW(masked_fill(zeros({3}), zeros({3}), 0.0), DTypeError);
  EXPECT_THROW(masked_fill(arange(3), tensor({1, 0, 1}, DType::u8), 0.5), ValueError);
  EXPECT_THROW(masked_fill(cast(arange(3), DType::u8), tensor({1, 0, 1}, DType::u8), 300.0), ValueError);
}

}  // namespace
}  // namespace tessera
