// cast: every dtype pair, rounding and truncation, chunked large tensors, gradients (floating
// inputs get cast(g), integer inputs none), errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kernels/common/dispatch.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::test_randn;

const DType kAll[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::u8};

TEST(Cast, AllPairsOnExactValues) {
  // Small integers are exact in every dtype, so every pair round-trips them.
  const std::vector<double> v = {0, 1, 2, 3, 7, 100, 255, 42, 5};
  for (DType from : kAll)
    for (DType to : kAll) {
      Tensor x = from_vector(v, {3, 3}, from);
      Tensor y = cast(x, to);
      EXPECT_EQ(y.dtype(), to);
      EXPECT_EQ(y.shape(), (Shape{3, 3}));
      EXPECT_TRUE(all_close(y, v, 0, 0)) << from << " -> " << to;
    }
}

TEST(Cast, RoundingAndTruncation) {
  Tensor x = tensor({1.7, -1.7, 2.0, -0.5, 1e6 + 0.25}, DType::f64);
  EXPECT_EQ(cast(x, DType::i32).to_vector<int>(), (std::vector<int>{1, -1, 2, 0, 1000000}));
  EXPECT_EQ(cast(tensor({0.9, 3.99, 254.5}), DType::u8).to_vector<int>(), (std::vector<int>{0, 3, 254}));
  // bf16 keeps 8 significant bits, rounding to nearest even: 1 + 2^-8 is a tie -> 1,
  // 1 + 3·2^-9 -> 1 + 2^-7.
  Tensor b = cast(tensor({1 + std::ldexp(1.0, -8), 1 + 3 * std::ldexp(1.0, -9), -3.0}, DType::f64), DType::bf16);
  EXPECT_TRUE(all_close(b, {1, 1 + std::ldexp(1.0, -7), -3}, 0, 0));
  // f16 overflows to inf above 65504; f32 -> f64 -> f32 is exact.
  EXPECT_TRUE(all_close(cast(tensor({70000, 0.5}), DType::f16), {INFINITY, 0.5}, 0, 0));
  Tensor r = test_randn({3, 7, 5}, 41, DType::f32);
  EXPECT_TRUE(all_close(cast(cast(r, DType::f64), DType::f32), r, 0, 0));
  EXPECT_TRUE(all_close(cast(r, DType::bf16), r, 1.0 / 256, 0));
}

TEST(Cast, LargeTensorIsChunkedCorrectly) {
  // More than one parallel chunk, odd length: every element converted exactly once.
  const int64_t n = 3 * kParallelGrain + 17;
  Tensor x = arange(0.0, static_cast<double>(n), 1.0, DType::f64);
  Tensor y = cast(x, DType::i32);
  std::vector<int> v = y.to_vector<int>();
  ASSERT_EQ(static_cast<int64_t>(v.size()), n);
  for (int64_t i = 0; i < n; i += 997) EXPECT_EQ(v[i], i);
  EXPECT_EQ(v[n - 1], n - 1);
  EXPECT_TRUE(all_close(cast(y, DType::f32), x, 0, 0));
}

TEST(Cast, Gradients) {
  // f64 -> f64 is a differentiable copy.
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return cast(x[0], DType::f64); }, {test_randn({3, 5}, 42)}));
  // Across dtypes: the gradient is cast back to the input's dtype.
  Tensor x = test_randn({7}, 43).requires_grad_();
  Tensor g = test_randn({7}, 44, DType::f32);
  cast(x, DType::f32).backward(g);
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), DType::f64);
  EXPECT_TRUE(all_close(x.grad(), g, 0, 0));
  // bf16 leaf through f32 math: the gradient arrives as bf16.
  Tensor h = cast(test_randn({5}, 45, DType::f32), DType::bf16).requires_grad_();
  sum(mul(cast(h, DType::f32), 3.0)).backward();
  EXPECT_EQ(h.grad().dtype(), DType::bf16);
  EXPECT_TRUE(all_close(h.grad(), {3, 3, 3, 3, 3}));
  // Integer outputs carry no gradient; integer inputs never require one.
  EXPECT_FALSE(cast(x, DType::i32).requires_grad());
  EXPECT_FALSE(cast(arange(4), DType::f32).requires_grad());
  // A floating path through an integer cast contributes nothing: only the direct term counts.
  Tensor z = tensor({1.5, 2.5}, DType::f64).requires_grad_();
  sum(add(z, cast(cast(z, DType::i32), DType::f64))).backward();
  EXPECT_TRUE(all_close(z.grad(), {1, 1}));
}

TEST(Cast, SymbolicAndErrors) {
  Tensor s = cast(symbolic({2, 9}, DType::f32), DType::bf16);
  EXPECT_TRUE(s.is_symbolic());
  EXPECT_EQ(s.meta(), (TensorMeta{Shape{2, 9}, DType::bf16, Device::cpu()}));
  try {
    cast(zeros({2, 3}), static_cast<DType>(42));
    FAIL() << "cast accepted an unknown dtype";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cast"), std::string::npos) << m;
    EXPECT_NE(m.find("f32[2, 3]"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace tessera
