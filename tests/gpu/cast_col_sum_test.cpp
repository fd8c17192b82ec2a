// cast_col_sum on the GPU against the CPU (label `gpu`; skipped visibly without a GPU): the
// fused f32 -> bf16/f16/f32 kernel (one, two and three summing passes), the fallback for other
// dtypes, odd widths and misaligned views; outputs NaN-poisoned first. y is a conversion, so
// it must equal the CPU's bits. s is summed in f32 in a fixed order on the GPU (f64 on the
// CPU): |Δs| <= 1e-5 · Σ|x| per column, and two runs give the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using namespace gpu_test;
using testing::all_close;

// Per column: |got − want| <= tol · Σ_n |x[n, m]| (the error bound of a sum, not of its value).
::testing::AssertionResult sums_close(const Tensor& got, const Tensor& want, const Tensor& x, double tol) {
  const std::vector<double> g = got.to(Device::cpu()).to_vector<double>(), w = want.to_vector<double>(),
                            xs = x.to(Device::cpu()).to_vector<double>();
  const size_t cols = w.size();
  std::vector<double> bound(cols, 0.0);
  for (size_t i = 0; i < xs.size(); ++i) bound[i % cols] += std::abs(xs[i]);
  for (size_t m = 0; m < cols; ++m)
    if (!(std::abs(g[m] - w[m]) <= tol * bound[m]))
      return ::testing::AssertionFailure() << "column " << m << ": got " << g[m] << ", want " << w[m];
  return ::testing::AssertionSuccess();
}

void expect_matches_cpu(const Tensor& x, DType to) {
  const std::vector<Tensor> want = cast_col_sum(x, to);
  const std::vector<Tensor> got = run_on_gpu_host<op::CastColSum>({to}, {x});
  EXPECT_TRUE(all_close(got[0], want[0], 0, 0)) << x.meta() << " -> " << dtype_name(to);
  const double tol = x.dtype() == DType::f64 ? 1e-12 : is_half(x.dtype()) ? 1e-2 : 1e-5;
  EXPECT_TRUE(sums_close(got[1], want[1], x, tol)) << x.meta() << " -> " << dtype_name(to);
}

TEST(CudaCastColSum, FusedF32MatchesCpu) {
  REQUIRE_GPU();
  // Rows: one partial tile, several (two passes), more than 128 tiles (three passes); widths
  // below, at and above a block's 128 columns.
  const Shape shapes[] = {{5, 4}, {128, 128}, {1000, 132}, {16384, 1152}, {20000, 8}};
  uint64_t seed = 700;
  for (const Shape& s : shapes)
    for (DType to : {DType::bf16, DType::f16, DType::f32}) expect_matches_cpu(random(s, seed++, DType::f32), to);
}

TEST(CudaCastColSum, FallbackDtypesAndWidthsMatchCpu) {
  REQUIRE_GPU();
  uint64_t seed = 800;
  for (DType from : kFloatTypes)
    for (const Shape& s : {Shape{37, 6}, Shape{300, 3}, Shape{64, 20}})
      expect_matches_cpu(random(s, seed++, from), from == DType::f32 ? DType::bf16 : DType::f32);
}

TEST(CudaCastColSum, MisalignedViewMatchesCpu) {
  REQUIRE_GPU();
  // x [200, 16] viewed one element into a flat buffer: 4 bytes off 16-byte alignment (a width
  // that is a multiple of 4 with aligned rows otherwise), so the fallback runs.
  Tensor flat = random({1 + 200 * 16}, 900, DType::f32);
  Tensor x = reshape(slice(flat, 0, 1), {200, 16});
  const std::vector<Tensor> want = cast_col_sum(x, DType::bf16);
  const std::vector<Tensor> got = cast_col_sum(reshape(slice(flat.to(kGpu), 0, 1), {200, 16}), DType::bf16);
  EXPECT_TRUE(all_close(got[0].to(Device::cpu()), want[0], 0, 0));
  EXPECT_TRUE(sums_close(got[1], want[1], x, 1e-5));
}

TEST(CudaCastColSum, RepeatsBitForBit) {
  REQUIRE_GPU();
  Tensor x = random({9000, 388}, 901, DType::f32);
  const std::vector<Tensor> a = run_on_gpu_host<op::CastColSum>({DType::bf16}, {x});
  const std::vector<Tensor> b = run_on_gpu_host<op::CastColSum>({DType::bf16}, {x});
  EXPECT_TRUE(all_close(a[1], b[1], 0, 0));
}

// col_sum (the column sums alone, f32 from bf16/f16/f32 x): bitwise cast_col_sum's sums of the
// exact f32 copy (one kernel, one order), near the CPU's f64 sums; odd widths take the fallback.
TEST(CudaColSum, MatchesCastColSumBitwiseAndTheCpu) {
  REQUIRE_GPU();
  uint64_t seed = 900;
  for (DType from : {DType::bf16, DType::f16, DType::f32})
    for (const Shape& s : {Shape{5, 4}, Shape{1000, 132}, Shape{16384, 1152}, Shape{300, 3}}) {
      const Tensor x = random(s, seed++, from);
      const Tensor got = run_on_gpu_host<op::ColSum>({}, {x})[0];
      ASSERT_EQ(got.dtype(), DType::f32);
      const std::vector<Tensor> both = run_on_gpu_host<op::CastColSum>({DType::bf16}, {cast(x, DType::f32)});
      if (s[1] % 4 == 0) EXPECT_TRUE(all_close(got, both[1], 0, 0)) << x.meta();
      EXPECT_TRUE(sums_close(got, col_sum(x), x, 1e-5)) << x.meta();
    }
}

}  // namespace
}  // namespace tessera
