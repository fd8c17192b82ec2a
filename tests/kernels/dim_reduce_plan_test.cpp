// The GPU reductions' work split (kernels/common/dim_reduce_plan.h), checked on the CPU: every
// plan covers the reduced dim exactly, rows split as before, and columns split until pass 1 has
// enough threads, in pieces that are neither too short nor too many.
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/common/dim_reduce_plan.h"

namespace tessera {
namespace {

using cuda::DimReducePlan;

// chunks pieces of chunk elements cover n, the last one not empty
void expect_covers(const DimReducePlan& p) {
  ASSERT_GE(p.chunks, 1);
  ASSERT_GE(p.chunk, 1);
  EXPECT_GE(p.chunk * p.chunks, p.n);
  EXPECT_LT(p.chunk * (p.chunks - 1), p.n > 0 ? p.n : 1);
}

TEST(DimReducePlan, RowsSplitOnlyWhenLong) {
  const DimReducePlan short_rows(5, 2 * DimReducePlan::kRowChunk, 1);
  expect_covers(short_rows);
  EXPECT_EQ(short_rows.chunks, 1);
  const DimReducePlan long_row(1, 100003, 1);
  expect_covers(long_row);
  EXPECT_EQ(long_row.chunk, DimReducePlan::kRowChunk);
  EXPECT_EQ(long_row.chunks, 13);
}

TEST(DimReducePlan, ManyLongColumnsSplitUntilThereAreEnoughThreads) {
  // the sparse LSTM's bias gradient: dpre [T·B = 16384, 4H = 16384] summed over its rows; it ran as
  // 16384 threads walking 16384 rows each
  const DimReducePlan bias(1, 16384, 16384);
  expect_covers(bias);
  EXPECT_EQ(bias.chunks, 16);
  EXPECT_EQ(bias.chunk, 1024);
  EXPECT_GE(bias.outer * bias.inner * bias.chunks, DimReducePlan::kColThreads);
  // enough columns already: one pass
  const DimReducePlan wide(1, 4096, DimReducePlan::kColThreads);
  expect_covers(wide);
  EXPECT_EQ(wide.chunks, 1);
}

TEST(DimReducePlan, ShortOrFewColumnsKeepTheirLimits) {
  const DimReducePlan few(1, 3001, 7);  // few long columns: pieces of 64 rows
  expect_covers(few);
  EXPECT_EQ(few.chunk, 64);
  EXPECT_EQ(few.chunks, 47);
  const DimReducePlan short_cols(1, 5, 4);  // too short to split
  EXPECT_EQ(short_cols.chunks, 1);
  EXPECT_EQ(short_cols.chunk, 5);
  const DimReducePlan one_long(1, 10000000, 2);  // pass 2 walks at most kMaxColChunks partials
  expect_covers(one_long);
  EXPECT_EQ(one_long.chunks, DimReducePlan::kMaxColChunks);
  const DimReducePlan empty(3, 0, 4);
  EXPECT_EQ(empty.chunks, 1);
  EXPECT_EQ(empty.chunk, 1);
}

}  // namespace
}  // namespace tessera
