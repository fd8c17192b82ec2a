#pragma once

#include "core/op.h"

namespace tessera {

/// Gradient of index_select: zeros [.., size, ..] (g's shape with dim `dim` set to `size`)
/// plus, for n = 0, 1, ..., N-1 in order, g[.., n, ..] added at [.., indices[n], ..].
/// Deterministic: every output element sums its contributions in index order.
Tensor index_select_backward(const Tensor& g, const Tensor& indices, int dim, int64_t size);

/// out[o, r, i] = sum over n with indices[n] == r of g[o, n, i]
/// (g [outer, N, inner], indices i32 [N] -> out [outer, size, inner]).
/// Backward (it is linear in g): index_select(gg, indices, dim); indices get no gradient.
struct IndexSelectBackward : OpBase {
  static constexpr const char* kName = "index_select_backward";
  static constexpr unsigned kSaveInputs = 0b10;  // indices
  struct Attrs {
    int dim = 0;
    int64_t size = 0;  ///< R, the size of dim in the index_select's input
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};

}  // namespace tessera
