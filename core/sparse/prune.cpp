#include "core/sparse/prune.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/error.h"

namespace tessera {

PruneResult prune_blocks(const BlockLayout& layout, const Tensor& weights, int64_t keep, BlockNorm norm) {
  const int64_t nnz = layout.nnz(), bs = layout.block_size();
  TS_CHECK(weights.defined(), ValueError, "prune_blocks: weights are an undefined tensor");
  TS_CHECK(weights.shape() == Shape({nnz, bs, bs}), ShapeError,
           "prune_blocks: weights " << weights.meta() << " do not fit " << layout.str() << ", which needs [" << nnz
                                    << ", " << bs << ", " << bs << "]");
  TS_CHECK(is_floating(weights.dtype()), DTypeError,
           "prune_blocks: weights " << weights.meta() << " must be floating point");
  TS_CHECK(weights.device().is_cpu(), DeviceError,
           "prune_blocks: weights " << weights.meta() << " must be on the CPU");
  TS_CHECK(!weights.is_symbolic(), ValueError,
           "prune_blocks: weights " << weights.meta() << " are symbolic (pruning reads values)");
  TS_CHECK(keep >= 1 && keep <= nnz, ValueError,
           "prune_blocks: keep = " << keep << " must be in [1, " << nnz << "] for " << layout.str());

  // score[k] = norm of block k (>= 0); NaN -> -1 so it ranks below every number.
  const std::vector<double> w = weights.to_vector<double>();
  const int64_t bb = bs * bs;
  std::vector<double> score(nnz);
  for (int64_t k = 0; k < nnz; ++k) {
    const double* blk = w.data() + k * bb;
    double acc = 0;  // sum of squares (l2) or running max |w| (max_abs)
    bool has_nan = false;
    for (int64_t i = 0; i < bb; ++i) {
      has_nan = has_nan || std::isnan(blk[i]);
      acc = norm == BlockNorm::l2 ? acc + blk[i] * blk[i] : std::max(acc, std::abs(blk[i]));
    }
    score[k] = has_nan ? -1.0 : norm == BlockNorm::l2 ? std::sqrt(acc) : acc;
  }

  // Largest first; stable, so equal norms keep increasing k. The first `keep` win, and sorting
  // them by k gives the new layout's row-major order (old k is row-major too).
  std::vector<int64_t> order(nnz);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  PruneResult res;
  res.kept.assign(order.begin(), order.begin() + keep);
  std::sort(res.kept.begin(), res.kept.end());

  const int64_t cols = layout.block_cols();
  std::vector<uint8_t> mask(layout.block_rows() * cols, 0);
  for (int64_t k : res.kept) mask[layout.block_row()[k] * cols + layout.block_col()[k]] = 1;
  res.layout = BlockLayout::from_mask(layout.in_features(), layout.out_features(), bs, mask);

  res.weights = empty({keep, bs, bs}, weights.dtype());
  const size_t block_bytes = static_cast<size_t>(bb) * dtype_size(weights.dtype());
  const auto* src = static_cast<const unsigned char*>(weights.data_ptr());
  auto* dst = static_cast<unsigned char*>(res.weights.data_ptr());
  for (int64_t j = 0; j < keep; ++j) std::memcpy(dst + j * block_bytes, src + res.kept[j] * block_bytes, block_bytes);
  return res;
}

PruneResult prune_blocks_fraction(const BlockLayout& layout, const Tensor& weights, double keep_fraction,
                                  BlockNorm norm) {
  TS_CHECK(keep_fraction > 0.0 && keep_fraction <= 1.0, ValueError,
           "prune_blocks_fraction: keep_fraction " << keep_fraction << " is outside (0, 1]");
  const int64_t keep = std::max<int64_t>(1, std::llround(keep_fraction * static_cast<double>(layout.nnz())));
  return prune_blocks(layout, weights, keep, norm);
}

}  // namespace tessera
