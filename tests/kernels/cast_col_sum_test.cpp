// cast_col_sum: {cast(x, dtype), sum(x, 0)} in one op, bitwise equal to the two ops on the CPU
// for every floating pair; argument errors; and the linear backward that uses it (db and the
// GEMM gradients equal to the unfused formulas).
#include <gtest/gtest.h>

#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
using testing::test_randn;

const DType kFloat[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

TEST(CastColSum, EqualsCastAndSumBitwise) {
  const Shape shapes[] = {{1, 1}, {7, 3}, {130, 12}, {257, 37}};
  uint64_t seed = 11;
  for (const Shape& s : shapes)
    for (DType from : kFloat)
      for (DType to : kFloat) {
        Tensor x = cast(test_randn(s, seed++, DType::f64), from);
        std::vector<Tensor> got = cast_col_sum(x, to);
        ASSERT_EQ(got.size(), 2u);
        EXPECT_EQ(got[0].meta(), cast(x, to).meta());
        EXPECT_EQ(got[1].meta(), sum(x, 0).meta());
        EXPECT_TRUE(all_close(got[0], cast(x, to), 0, 0)) << s << " " << from << " -> " << to;
        EXPECT_TRUE(all_close(got[1], sum(x, 0), 0, 0)) << s << " " << from << " -> " << to;
      }
}

TEST(CastColSum, EmptyRowsGiveZeroSums) {
  std::vector<Tensor> got = cast_col_sum(empty({0, 5}, TensorOptions(DType::f32)), DType::bf16);
  EXPECT_EQ(got[0].shape(), (Shape{0, 5}));
  EXPECT_TRUE(all_close(got[1], std::vector<double>(5, 0.0), 0, 0));
}

TEST(CastColSum, Errors) {
  Tensor x = test_randn({4, 3}, 1, DType::f32);
  EXPECT_THROW(cast_col_sum(test_randn({12}, 1, DType::f32), DType::bf16), ShapeError);
  EXPECT_THROW(cast_col_sum(test_randn({2, 2, 3}, 1, DType::f32), DType::bf16), ShapeError);
  EXPECT_THROW(cast_col_sum(x, DType::i32), DTypeError);
  EXPECT_THROW(cast_col_sum(cast(x, DType::i32), DType::f32), DTypeError);
}

// linear's backward with an f32 output of bf16 operands takes dy's cast and db from
// cast_col_sum: the gradients equal the formulas written out with cast and sum.
TEST(CastColSum, LinearBackwardUsesIt) {
  Tensor x = test_randn({33, 20}, 3, DType::bf16).requires_grad_();
  Tensor w = test_randn({20, 12}, 4, DType::bf16).requires_grad_();
  Tensor b = test_randn({12}, 5, DType::f32).requires_grad_();
  Tensor dy = test_randn({33, 12}, 6, DType::f32);
  call<op::Linear>({true}, {x, w, b})[0].backward(dy);
  Tensor g = cast(dy, DType::bf16);
  EXPECT_TRUE(all_close(b.grad(), sum(dy, 0), 0, 0));
  EXPECT_TRUE(all_close(x.grad(), matmul(g, w, false, true), 0, 0));
  EXPECT_TRUE(all_close(w.grad(), matmul(x, g, true, false), 0, 0));
}

// col_sum: sum(x, 0) in f32 (f64 for f64 x) from any floating x, bitwise the sums of x widened
// to f32 (the CPU sums in f64 either way); errors.
TEST(ColSum, EqualsTheSumOfTheWidenedInputBitwise) {
  for (DType dt : kFloat)
    for (const Shape& s : {Shape{1, 1}, Shape{7, 3}, Shape{130, 12}, Shape{0, 5}}) {
      const Tensor x = cast(test_randn(s, 40, DType::f32), dt);
      const Tensor got = col_sum(x);
      const DType acc = dt == DType::f64 ? DType::f64 : DType::f32;
      EXPECT_EQ(got.dtype(), acc);
      EXPECT_TRUE(all_close(got, sum(cast(x, acc), 0), 0, 0)) << x.meta();
    }
  expect_error<ShapeError>([] { col_sum(zeros({3})); }, {"col_sum", "[N, M]"});
  expect_error<DTypeError>([] { col_sum(zeros({2, 3}, DType::i32)); }, {"col_sum"});
}

}  // namespace
}  // namespace tessera
