// Magnitude pruning of block-sparse weights: keep the blocks with the largest norms.
//
//   PruneResult p = prune_blocks(*layout, w, /*keep=*/layout->nnz() / 2);   // w [nnz, bs, bs]
//   Tensor y = bsmm(x, p.weights, p.layout);                                // the pruned layer
//
// The result is a new layout (a subset of the old one's blocks) and a new weight tensor
// [keep, bs, bs] in the new layout's row-major block order: p.weights[j] = w[p.kept[j]].
// Since the old block order is row-major too, kept is increasing. The weights are a fresh
// CPU tensor without autograd history.
#pragma once

#include <cstdint>
#include <vector>

#include "core/sparse/block_layout.h"
#include "core/tensor.h"

namespace tessera {

/// Norm of one bs x bs block: l2 = sqrt(sum w^2) (Frobenius), max_abs = max |w|.
enum class BlockNorm { l2, max_abs };

struct PruneResult {
  LayoutPtr layout;            ///< the kept blocks
  Tensor weights;              ///< [keep, bs, bs], same dtype as the input weights
  std::vector<int64_t> kept;   ///< kept[j] = old index k of new block j (increasing)
};

/// Keeps the `keep` blocks (1 <= keep <= nnz) of largest norm; ties go to the lower old index k,
/// and NaN norms rank below every number. weights: a floating CPU tensor [nnz, bs, bs] matching
/// `layout` (ShapeError naming both shapes; DTypeError / DeviceError otherwise); ValueError for a
/// bad keep. Output columns may become empty; the layout never does.
PruneResult prune_blocks(const BlockLayout& layout, const Tensor& weights, int64_t keep,
                         BlockNorm norm = BlockNorm::l2);

/// prune_blocks with keep = max(1, round(keep_fraction * nnz)); keep_fraction in (0, 1].
PruneResult prune_blocks_fraction(const BlockLayout& layout, const Tensor& weights, double keep_fraction,
                                  BlockNorm norm = BlockNorm::l2);

}  // namespace tessera
