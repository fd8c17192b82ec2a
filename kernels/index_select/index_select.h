#pragma once

#include "core/op.h"

namespace tessera {

/// Gathers slices of x along `dim` (any dtype): x [.., R, ..], indices i32 [N] -> [.., N, ..]
/// with out[.., n, ..] = x[.., indices[n], ..]. Indices repeat freely; one outside [0, R) is a
/// ValueError naming it and R. Gradient w.r.t. x: index_select_backward (a deterministic
/// scatter-add, so repeated indices accumulate).
Tensor index_select(const Tensor& x, const Tensor& indices, int dim = 0);

/// Embedding lookup: weight [V, C], ids i32 of any shape [...] -> [..., C] with
/// out[..., :] = weight[ids[...], :]. A composite of reshape and index_select along dim 0.
Tensor embedding(const Tensor& weight, const Tensor& ids);

/// out[o, n, i] = x[o, indices[n], i] (x viewed as [outer, R, inner], out [outer, N, inner]).
/// Backward: dx = index_select_backward(g, indices, dim, R); indices get no gradient.
struct IndexSelect : OpBase {
  static constexpr const char* kName = "index_select";
  static constexpr bool kHalfNative = true;      // moves bytes, any dtype
  static constexpr unsigned kSaveInputs = 0b10;  // indices
  struct Attrs {
    int dim = 0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};

namespace cpu {
/// ValueError naming `op`, the bad index, its position and R unless all indices are in [0, R).
void check_indices(const char* op, const Tensor& indices, int64_t R, const TensorMeta& of);
}  // namespace cpu

}  // namespace tessera
