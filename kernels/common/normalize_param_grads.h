// The dgamma/dbeta reduction of the normalization backwards on the CPU (layer_norm_backward,
// sparse_layer_norm_backward), deterministic: rows are cut into a fixed number of row blocks,
// each block sums its rows into its own partial sums (in parallel), and the partials are then
// added in block order, so the result does not depend on the thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/common/dispatch.h"

namespace tessera {
namespace cpu {

/// Row blocks of the reduction (at most; fewer when there are fewer rows).
constexpr int64_t kNormParamGradBlocks = 64;

/// Calls rows_fn(r0, r1, dgamma_part, dbeta_part) for row blocks [r0, r1) covering [0, rows),
/// in parallel when rows·c is large; dgamma_part and dbeta_part are that block's zeroed double
/// sums [C], to which rows_fn adds its rows' g·xhat and g. Then
///   dgamma[j] = Σ_blocks dgamma_part[j],   dbeta[j] = Σ_blocks dbeta_part[j]
/// in block order, rounded once to T.
template <class T, class RowsFn>
void reduce_norm_param_grads(int64_t rows, int64_t c, T* dgamma, T* dbeta, const RowsFn& rows_fn) {
  const int64_t nblocks = std::min<int64_t>(rows, kNormParamGradBlocks);
  const int64_t per_block = nblocks > 0 ? (rows + nblocks - 1) / nblocks : 0;
  std::vector<double> partial(static_cast<size_t>(nblocks * 2 * c), 0.0);  // [nblocks, 2, C]
#pragma omp parallel for if (rows * c > kParallelGrain)
  for (int64_t b = 0; b < nblocks; ++b) {
    double* dgamma_b = partial.data() + b * 2 * c;
    rows_fn(b * per_block, std::min(rows, (b + 1) * per_block), dgamma_b, dgamma_b + c);
  }
  for (int64_t j = 0; j < c; ++j) {
    double sg = 0, sb = 0;
    for (int64_t b = 0; b < nblocks; ++b) {
      sg += partial[b * 2 * c + j];
      sb += partial[b * 2 * c + c + j];
    }
    dgamma[j] = static_cast<T>(sg);
    dbeta[j] = static_cast<T>(sb);
  }
}

}  // namespace cpu
}  // namespace tessera
