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

}  // namespace cpu
}  // namespace tessera
