// pieces_for_waves (kernels/common/work_waves.h): the cut of equal work items that a persistent
// grid finishes soonest, against the waves counted by hand and against a brute-force search.
#include "kernels/common/work_waves.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(WorkWaves, PiecesForTheLstmLayersGateRuns) {
  // the gate runs of lstm_step's layers on 132 multiprocessors (docs/lstm_gpu.md, "Tenth run")
  EXPECT_EQ(pieces_for_waves(173, 132, 4), 3);  // random H 4096, recurrent: 2, 1.5, 4/3, 1.5 item-times
  EXPECT_EQ(pieces_for_waves(184, 132, 4), 2);  // random H 4096, input: 2, 1.5, 5/3, 1.5 (a tie: fewer)
  EXPECT_EQ(pieces_for_waves(128, 132, 4), 1);  // balanced H 4096: one wave already
  EXPECT_EQ(pieces_for_waves(259, 132, 4), 1);  // random H 8192 at 1/64: 2 at every cut
  EXPECT_EQ(pieces_for_waves(264, 132, 4), 1);  // exactly two full waves
  EXPECT_EQ(pieces_for_waves(133, 132, 4), 4);  // one item over: 2, 1.5, 4/3, 5/4 item-times
}

TEST(WorkWaves, EdgeCasesGiveOnePiece) {
  EXPECT_EQ(pieces_for_waves(0, 132, 4), 1);
  EXPECT_EQ(pieces_for_waves(10, 0, 4), 1);
  EXPECT_EQ(pieces_for_waves(10, 132, 1), 1);
  EXPECT_EQ(pieces_for_waves(1, 132, 8), 8);  // one item: one wave of 1/c of it, so the most pieces
}

TEST(WorkWaves, EqualsABruteForceSearchInDoubles) {
  for (int64_t grid : {1, 7, 132, 264})
    for (int64_t items = 1; items <= 600; ++items)
      for (int most : {1, 2, 4, 8}) {
        int best = 1;
        double best_t = static_cast<double>((items + grid - 1) / grid);
        for (int c = 2; c <= most; ++c) {
          const double t = static_cast<double>((items * c + grid - 1) / grid) / c;
          if (t < best_t - 1e-12) {
            best = c;
            best_t = t;
          }
        }
        ASSERT_EQ(pieces_for_waves(items, grid, most), best) << items << " items, grid " << grid << ", most " << most;
      }
}

}  // namespace
}  // namespace tessera
