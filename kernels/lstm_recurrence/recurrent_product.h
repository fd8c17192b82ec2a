// The recurrent product of one LSTM step on the CPU, shared by lstm_recurrence and its backward:
//   forward     out [B, 4H] += a [B, H] · W_h            (a = h_{t−1})
//   transposed  out [B, H]  += a [B, 4H] · W_hᵀ          (a = dpre_{t+1})
// with W_h [H, 4H] dense (layout null) or the blocks w [nnz, bs, bs] of `layout` (block k covers
// rows r·bs…, columns c·bs… of W_h). Blocks are summed in increasing k (deterministic).
#pragma once

#include <cstdint>

#include "core/sparse/block_layout.h"
#include "kernels/common/eigen_maps.h"

namespace tessera {
namespace cpu {

template <class T>
void recurrent_product(const T* a, const T* w, const BlockLayout* layout, int64_t b, int64_t hs, int64_t g4,
                       bool transposed, T* out) {
  using Strided = Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>>;
  using ConstStrided = Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<>>;
  if (!layout) {
    if (transposed) {
      RowMap<T>(out, b, hs).noalias() += ConstRowMap<T>(a, b, g4) * ConstRowMap<T>(w, hs, g4).transpose();
    } else {
      RowMap<T>(out, b, g4).noalias() += ConstRowMap<T>(a, b, hs) * ConstRowMap<T>(w, hs, g4);
    }
    return;
  }
  const int64_t bs = layout->block_size();
  const std::vector<int32_t>& rows = layout->block_row();
  const std::vector<int32_t>& cols = layout->block_col();
  for (int64_t k = 0; k < layout->nnz(); ++k) {
    ConstRowMap<T> wk(w + k * bs * bs, bs, bs);
    const int64_t r = rows[k] * bs, c = cols[k] * bs;
    if (transposed) {  // out[:, r-block] += a[:, c-block] · W[k]ᵀ
      Strided(out + r, b, bs, Eigen::OuterStride<>(hs)).noalias() +=
          ConstStrided(a + c, b, bs, Eigen::OuterStride<>(g4)) * wk.transpose();
    } else {  // out[:, c-block] += a[:, r-block] · W[k]
      Strided(out + c, b, bs, Eigen::OuterStride<>(g4)).noalias() +=
          ConstStrided(a + r, b, bs, Eigen::OuterStride<>(hs)) * wk;
    }
  }
}

}  // namespace cpu
}  // namespace tessera
