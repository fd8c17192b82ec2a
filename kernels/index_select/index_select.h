#pragma once

#include "core/op.h"

namespace tessera {

/// Gathers slices of x along `dim` (any dtype): x [.., R, ..], indices i32 [N] -> [.., N, ..]
/// with out[.., n, ..] = x[.., indices[n], ..]. Indices repeat freely; one outside [0, R) is a
/// ValueError naming it and R (on a GPU its row is NaN and the ValueError comes at the next host
/// wait, such as to_vector() or item(): core/cuda/index_errors.cuh; under TESSERA_CUDA_SYNC=1 at
/// the op: cuda::check_indices_when_syncing). Gradient w.r.t. x: index_select_backward (a deterministic
/// scatter-add, so repeated indices accumulate).
Tensor index_select(const Tensor& x, const Tensor& indices, int dim = 0);

/// Embedding lookup: weight [V, C], ids i32 of any shape [...] -> [..., C] with
/// out[..., :] = weight[ids[...], :]. A composite of reshape and index_select along dim 0.
Tensor embedding(const Tensor& weight, const Tensor& ids);

namespace op {
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
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

namespace cpu {
/// ValueError naming `op`, the bad index, its position and R unless all indices are in [0, R).
void check_indices(const char* op, const Tensor& indices, int64_t R, const TensorMeta& of);
}  // namespace cpu

namespace cuda {
/// Indices on a GPU cannot be checked without waiting for the device, which a step captured as
/// a CUDA graph must not do. With TESSERA_CUDA_SYNC=1 (where every op waits anyway) this copies
/// them to the host and throws cpu::check_indices' ValueError; otherwise it does nothing, and
/// the kernels stay in bounds on their own: index_select writes NaN (0 for integer dtypes) for a
/// bad index, index_select_backward leaves it out, and both record it in the device's
/// index-error record, reported at the next host wait (core/cuda/index_errors.cuh).
void check_indices_when_syncing(const char* op, const Tensor& indices, int64_t R, const TensorMeta& of);
}  // namespace cuda

}  // namespace tessera
