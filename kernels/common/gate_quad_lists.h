// The work list of bsmm's column quads (host code, every build): nn::LSTM's gate layouts repeat one
// mask for the four gates (lstm_gate_layout: W [C, 4H] in blocks, q = H/bs block columns a gate,
// the lists of columns c, c + q, c + 2q, c + 3q hold the same block rows in the same order), so one
// work item of the sm_90a forward kernel can cover all four gates of a gate-0 column c: each step
// copies one A strip and the entry's four weight blocks and multiplies them as one
// wgmma.m64n(4·bs) (kernels/common/cuda/bsmm_sm90_gather.cu, kCols = 4):
//
//   work [q, 3]: (column c, first entry, end entry), longest list first (ties by column)
//   entries [E, 5]: (input block row r, block of gate 0, 1, 2, 3)
//
// Twice the flops per byte of A that column pairs (c and c + q) give, four times single columns'.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/sparse/block_layout.h"

namespace tessera {

struct GateQuadLists {
  std::vector<int32_t> work;     ///< [q, 3]
  std::vector<int32_t> entries;  ///< [E, 5]
};

/// The quads of a gate layout of q columns a gate (the caller checks: cuda::gate_quarter).
inline GateQuadLists gate_quad_lists(const BlockLayout& l, int32_t q) {
  GateQuadLists out;
  const auto &col_ptr = l.col_ptr(), &col_blocks = l.col_blocks(), &block_row = l.block_row();
  std::vector<std::array<int32_t, 3>> work;
  for (int32_t c = 0; c < q; ++c) {
    const int32_t first = static_cast<int32_t>(out.entries.size() / 5);
    for (int32_t i = col_ptr[c]; i < col_ptr[c + 1]; ++i) {
      out.entries.push_back(block_row[col_blocks[i]]);
      for (int32_t g = 0; g < 4; ++g) out.entries.push_back(col_blocks[col_ptr[c + g * q] + i - col_ptr[c]]);
    }
    work.push_back({c, first, static_cast<int32_t>(out.entries.size() / 5)});
  }
  std::stable_sort(work.begin(), work.end(),
                   [](const auto& x, const auto& y) { return x[2] - x[1] > y[2] - y[1]; });
  for (const auto& w : work) out.work.insert(out.work.end(), w.begin(), w.end());
  return out;
}

}  // namespace tessera
