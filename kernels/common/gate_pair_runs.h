// The work list of bsmm_dw_pair's gate-run kernel (host code, every build): two gate layouts a
// and b of one dY [n, 4H] (nn::LSTM's input and recurrent masks, whose weight gradients both read
// dpre), each with four gates of q block columns whose lists c, c + q, c + 2q and c + 3q hold the
// same block rows (lstm_gate_layout). Per gate-0 column c the entries are a's list, then b's;
// the kernel (kernels/common/cuda/bsmm_sm90_gate_gradient.cu) takes runs of at most `run`
// consecutive entries, each with its four gates' blocks, so that one copy of the column's dY
// strips feeds both layouts' blocks and a column's short lists share one run:
//
//   entries [E, 5]: (X row code, block of gate 0, 1, 2, 3)   code = block row r (from X_a) or
//                                                            r | kPairFromB (from X_b)
//   runs [R, 3]: (first entry, count ≤ run, column c | kRunOpensColumn on c's first run),
//                longest first (ties by column)
//
// b's blocks are numbered after a's (k + nnz_a): the kernel writes k < nnz_a to dW_a, the rest to
// dW_b. A column's first run may also sum dY's columns of its four gates (bsmm_dw_pair's column
// sums).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/sparse/block_layout.h"

namespace tessera {

/// The bit of an entry's row code that says its X strip comes from X_b.
constexpr int32_t kPairFromB = int32_t{1} << 30;

/// The bit of a run's column that marks the column's first run.
constexpr int32_t kRunOpensColumn = int32_t{1} << 30;

struct GatePairRuns {
  std::vector<int32_t> runs;     ///< [R, 3]
  std::vector<int32_t> entries;  ///< [E, 5]
  bool every_column = true;      ///< every gate-0 column has a run (an entry in a or b)
};

/// The runs and entries of layouts a and b, both gate layouts of q columns a gate (the caller
/// checks: cuda::gate_quarter), of the same block size and out_features 4·q·bs.
inline GatePairRuns gate_pair_runs(const BlockLayout& a, const BlockLayout& b, int32_t q, int32_t run) {
  GatePairRuns out;
  std::vector<std::array<int32_t, 3>> runs;
  const int32_t nnz_a = static_cast<int32_t>(a.nnz());
  for (int32_t c = 0; c < q; ++c) {
    const int32_t first = static_cast<int32_t>(out.entries.size() / 5);
    for (int source = 0; source < 2; ++source) {
      const BlockLayout& l = source == 0 ? a : b;
      const auto &col_ptr = l.col_ptr(), &col_blocks = l.col_blocks(), &block_row = l.block_row();
      const int32_t from = source == 0 ? 0 : kPairFromB, base = source == 0 ? 0 : nnz_a;
      for (int32_t i = col_ptr[c]; i < col_ptr[c + 1]; ++i) {
        out.entries.push_back(block_row[col_blocks[i]] | from);
        for (int32_t g = 0; g < 4; ++g) out.entries.push_back(base + col_blocks[col_ptr[c + g * q] + i - col_ptr[c]]);
      }
    }
    const int32_t end = static_cast<int32_t>(out.entries.size() / 5);
    for (int32_t e = first; e < end; e += run)
      runs.push_back({e, std::min(run, end - e), e == first ? c | kRunOpensColumn : c});
    out.every_column = out.every_column && end > first;
  }
  std::stable_sort(runs.begin(), runs.end(), [](const auto& x, const auto& y) { return x[1] > y[1]; });
  for (const auto& r : runs) out.runs.insert(out.runs.end(), r.begin(), r.end());
  return out;
}

/// The runs of at most `run` entries that the pair takes (Σ_c ⌈(a_c + b_c) / run⌉ over the gate-0
/// columns c < q) and that two gate-run launches take (Σ_c ⌈a_c / run⌉ + ⌈b_c / run⌉). A run
/// copies its column's four dY strips at every step whatever it holds, so the pair reads dY
/// fewer times only where it takes fewer runs: where each mask fills whole runs alone (the
/// balanced layouts' 8 and 8 entries a column) it saves nothing.
struct PairRunCounts {
  int64_t paired = 0, apart = 0;
};
inline PairRunCounts pair_run_counts(const BlockLayout& a, const BlockLayout& b, int32_t q, int32_t run) {
  PairRunCounts n;
  auto runs = [run](int64_t entries) { return (entries + run - 1) / run; };
  for (int32_t c = 0; c < q; ++c) {
    const int64_t in_a = a.col_ptr()[c + 1] - a.col_ptr()[c], in_b = b.col_ptr()[c + 1] - b.col_ptr()[c];
    n.paired += runs(in_a + in_b);
    n.apart += runs(in_a) + runs(in_b);
  }
  return n;
}

/// Whether the pair is worth a launch: it saves at least 1/16 of two launches' runs. Measured on
/// the H100 (2026-12-07): the balanced sparse H 4096 layer (8 + 8 entries every column, no run
/// saved) stepped in 5.38 ms paired against 5.21 apart, the random H 4096 at 1/4 (~4% saved) 26.3
/// against 24.5 (paced: 24.6 against 24.4); H 4096 at 1/16 (~12% saved) gained.
inline bool pair_pays(const PairRunCounts& n) { return n.apart > 0 && 16 * (n.apart - n.paired) >= n.apart; }

}  // namespace tessera
