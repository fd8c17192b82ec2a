// How finely to cut equal work items for a persistent grid (host code, every build). A grid of G
// thread blocks that takes items as it frees up runs N equal items in ⌈N / G⌉ waves; cut each item
// into c pieces and it runs ⌈N·c / G⌉ waves of 1/c of an item. The sm_90a gate-run dW kernel
// (kernels/common/cuda/bsmm_sm90_gate_gradient.cu) has such items: a run costs about the same
// whatever it holds, so the random sparse H 4096 LSTM layer's 173 runs on 132 multiprocessors take
// two item-times, where the balanced layout's 128 take one (docs/lstm_gpu.md, "Tenth run").
//
//   pieces_for_waves(173, 132, 4) == 3   // 1 piece: 2 item-times, 2: 1.5, 3: 4/3, 4: 1.5
#pragma once

#include <cstdint>

namespace tessera {

/// The c in 1 .. most that makes ⌈items·c / grid⌉ / c, the time in item-times, smallest; ties go to
/// fewer pieces (each piece costs a pipeline fill, an epilogue and partial sums). 1 where items or
/// grid is not positive.
inline int pieces_for_waves(int64_t items, int64_t grid, int most) {
  if (items <= 0 || grid <= 0) return 1;
  int best = 1;
  int64_t best_waves = (items + grid - 1) / grid;  // time best_waves / best
  for (int c = 2; c <= most; ++c) {
    const int64_t waves = (items * c + grid - 1) / grid;
    if (waves * best < best_waves * c) {  // waves / c < best_waves / best
      best = c;
      best_waves = waves;
    }
  }
  return best;
}

}  // namespace tessera
