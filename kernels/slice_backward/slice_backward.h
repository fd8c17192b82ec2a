#pragma once

#include "core/op.h"

namespace tessera {

/// Gradient of slice: zeros of `shape` with g placed at [start, start + g.size(dim)) along
/// `dim` (g has `shape`'s sizes elsewhere; start already normalized, >= 0). Any dtype.
Tensor slice_backward(const Tensor& g, const Shape& shape, int dim, int64_t start);

namespace op {
/// out[o, k, i] = g[o, k - start, i] for start <= k < start + n, else 0
/// (g [outer, n, inner] -> out [outer, shape[dim], inner]).
/// Backward (it is linear): slice(gg, dim, start, start + n).
struct SliceBackward : OpBase {
  static constexpr const char* kName = "slice_backward";
  static constexpr bool kHalfNative = true;  // zero-fill and byte copies, any dtype
  struct Attrs {
    Shape shape;  ///< shape of the slice's input
    int dim = 0;
    int64_t start = 0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
