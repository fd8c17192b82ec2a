#pragma once

#include "core/op.h"

namespace tessera {

/// Gradient of max/min along `dim`: zeros of `shape` with g[o, i] written at
/// [o, indices[o, i], i] (x viewed as [outer, size(dim), inner]). g and indices (i32) are
/// shaped like the reduction's output (dim removed, or kept with size 1).
Tensor max_backward(const Tensor& g, const Tensor& indices, const Shape& shape, int dim);

namespace op {
/// dx[o, k, i] = g[o, i] if k == indices[o, i] else 0;  g, indices [outer, inner] -> dx `shape`.
/// Indices outside [0, size(dim)) are a ValueError (checked in the CPU kernel; the GPU kernel,
/// which does not wait for the indices, drops their gradient). Not differentiable
/// (a second derivative of max would gather gg at the indices).
struct MaxBackward : OpBase {
  static constexpr const char* kName = "max_backward";
  static constexpr bool kDifferentiable = false;
  struct Attrs {
    Shape shape;  ///< shape of the max's input
    int dim = 0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
