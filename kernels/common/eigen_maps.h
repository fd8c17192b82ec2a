// Row-major Eigen views of tensor buffers, for the CPU kernels (tessera's tensors are row-major;
// Eigen's default is column-major). Internal to kernels' .cpp files, like array_map.h.
//
//   cpu::ConstRowMap<T> A(x, rows, cols);   // x: const T*, [rows, cols] row-major
//   cpu::RowMap<T> C(y, rows, cols);
//   C.noalias() = A * B;
#pragma once

#include <Eigen/Core>

namespace tessera {
namespace cpu {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using RowMap = Eigen::Map<RowMat<T>>;
template <class T>
using ConstRowMap = Eigen::Map<const RowMat<T>>;
/// A [rows, cols] block inside a wider row-major buffer (rows `OuterStride` elements apart).
template <class T>
using StridedRowMap = Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<>>;

/// Fills each row q of `buf` (a row-major [rows, cols] matrix or block) with row row_of(q) of the
/// buffer `src`, whose rows are `stride` elements apart (its first `cols` columns), or with zeros
/// where row_of(q) < 0.
template <class T, class Buf, class F>
void gather_rows(Buf&& buf, const T* src, int64_t stride, F&& row_of) {
  for (Eigen::Index q = 0; q < buf.rows(); ++q) {
    const int64_t r = row_of(static_cast<int64_t>(q));
    if (r < 0) {
      buf.row(q).setZero();
    } else {
      buf.row(q) = Eigen::Map<const RowMat<T>>(src + r * stride, 1, buf.cols());
    }
  }
}

}  // namespace cpu
}  // namespace tessera
