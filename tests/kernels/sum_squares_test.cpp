// sum_squares on the CPU: equal to the f64 sum of mul(x, x)'s stored squares (every floating
// dtype, odd shapes, empty tensors), bitwise for tensors below the parallel chunk and to 1e-13
// across chunks; the same bits on every run; symbolic use; argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::expect_error;
using testing::test_randn;

const DType kFloats[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

std::vector<Tensor> random_tensors(const std::vector<Shape>& shapes, DType dt, uint64_t seed) {
  std::vector<Tensor> xs;
  for (const Shape& s : shapes) xs.push_back(cast(mul(test_randn(s, ++seed, DType::f64), 3.0), dt));
  return xs;
}

// Σ_k (Σ_i mul(x_k, x_k)[i] in index order), each tensor's sum started from 0, in f64: the
// squares exactly as mul stores them in x's dtype.
double reference(const std::vector<Tensor>& xs) {
  double total = 0;
  for (const Tensor& x : xs) {
    double s = 0;
    for (double v : mul(x, x).to_vector<double>()) s += v;
    total += s;
  }
  return total;
}

const std::vector<Shape> kSmall = {{3, 5}, {0}, {7}, {1}, {33, 17, 3}, {2, 0, 3}, {1000}, {5, 1, 9}};

TEST(SumSquares, EqualsTheSumOfStoredSquaresBitwise) {
  for (DType dt : kFloats) {
    const std::vector<Tensor> xs = random_tensors(kSmall, dt, 10);
    const Tensor y = sum_squares(xs);
    EXPECT_EQ(y.meta(), (TensorMeta{Shape{}, DType::f64, Device::cpu()}));
    EXPECT_EQ(y.item<double>(), reference(xs)) << dtype_name(dt);
  }
}

TEST(SumSquares, SquaresAreRoundedToTheirDtype) {
  // x = 1 + 2^-k is exact in the dtype; x² = 1 + 2^(1-k) + 2^-2k loses its last term when
  // rounded to the dtype's precision (bf16: 8 significant bits, f16: 11, f32: 24), which a
  // product kept in f32 or f64 would not.
  auto sq = [](DType dt, int k) {
    return sum_squares({full({3}, 1 + std::ldexp(1.0, -k), dt)}).item<double>();
  };
  EXPECT_EQ(sq(DType::bf16, 7), 3 * (1 + std::ldexp(1.0, -6)));
  EXPECT_EQ(sq(DType::f16, 10), 3 * (1 + std::ldexp(1.0, -9)));
  EXPECT_EQ(sq(DType::f32, 20), 3 * (1 + std::ldexp(1.0, -19)));
  EXPECT_EQ(sq(DType::f64, 20), 3 * (1 + std::ldexp(1.0, -19) + std::ldexp(1.0, -40)));
}

TEST(SumSquares, LargeTensorsAcrossParallelChunks) {
  for (DType dt : kFloats) {
    const std::vector<Tensor> xs = random_tensors({{100003}, {7}, {3, 40000}, {0}, {65536}}, dt, 40);
    const double want = reference(xs), got = sum_squares(xs).item<double>();
    EXPECT_NEAR(got, want, 1e-13 * want) << dtype_name(dt);
  }
}

TEST(SumSquares, SameBitsEveryRun) {
  const std::vector<Tensor> xs = random_tensors({{100003}, {33, 17}, {70001}}, DType::f32, 70);
  const double first = sum_squares(xs).item<double>();
  for (int r = 0; r < 4; ++r) EXPECT_EQ(sum_squares(xs).item<double>(), first);
}

TEST(SumSquares, EmptyTensorsOnlyGiveZero) {
  EXPECT_EQ(sum_squares({zeros({0}), zeros({3, 0})}).item<double>(), 0.0);
}

TEST(SumSquares, SymbolicNeedsNoKernel) {
  const uint64_t before = kernels_run();
  const Tensor y = sum_squares({symbolic({4, 3}, DType::bf16), symbolic({5}, DType::bf16)});
  EXPECT_EQ(kernels_run(), before);
  EXPECT_TRUE(y.is_symbolic());
  EXPECT_EQ(y.meta(), (TensorMeta{Shape{}, DType::f64, Device::cpu()}));
}

TEST(SumSquares, Errors) {
  expect_error<ValueError>([] { sum_squares({}); }, {"sum_squares", "at least one"});
  expect_error<DTypeError>([] { sum_squares({zeros({3}), zeros({2}, DType::f64)}); },
                           {"sum_squares", "input 1", "f64[2]", "f32[3]"});
  expect_error<DTypeError>([] { sum_squares({from_vector(std::vector<int32_t>{1, 2}, {2})}); },
                           {"sum_squares", "floating", "i32[2]"});
  expect_error<ValueError>([] { sum_squares({zeros({3}), Tensor()}); }, {"sum_squares", "undefined"});
}

}  // namespace
}  // namespace tessera
