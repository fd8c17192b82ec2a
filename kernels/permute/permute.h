#pragma once

#include "core/op.h"

namespace tessera {

/// Reorders the dims of x (any dtype, rank <= 8): out.shape[d] = x.shape[perm[d]].
/// perm lists every dim once (negative entries count from the end). Example, splitting
/// attention heads: permute(x, {0, 2, 1, 3}) turns [B, T, H, D] into [B, H, T, D].
Tensor permute(const Tensor& x, const std::vector<int>& perm);

namespace op {
/// out[i_0, ..., i_{n-1}] = x[j] with j[perm[d]] = i_d (a materialized copy).
/// Backward: permute(g, inverse(perm)), inverse[perm[d]] = d.
struct Permute : OpBase {
  static constexpr const char* kName = "permute";
  static constexpr bool kHalfNative = true;  // moves bytes, any dtype
  struct Attrs {
    std::vector<int> perm;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

namespace cpu {
/// out = x with dims reordered by `perm` (already normalized to [0, rank)), any dtype.
/// Dims that stay adjacent are merged first; then whole rows are copied when the last dim is
/// kept, tiles are transposed when the last two (merged) dims swap, else a strided gather.
void permute_copy(const Tensor& in, const Tensor& out, const std::vector<int>& perm);
}  // namespace cpu

namespace cuda {
/// The same on the GPU (kernels/permute/permute.cu; CUDA builds), queued on out's stream.
void permute_copy(const Tensor& in, const Tensor& out, const std::vector<int>& perm);
}  // namespace cuda

}  // namespace tessera
