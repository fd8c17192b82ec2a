#pragma once

#include "core/op.h"
#include "core/sparse/block_layout.h"

namespace tessera {

/// Input gradient of bsmm: dx [N, C] = dY·Wᵀ over the stored blocks only, i.e.
/// dX[:, r-block] = sum over stored blocks k of row r of gate[k]·dY[:, c-block]·W[k]ᵀ.
/// dy [N, K] (K = layout->out_features()), w [nnz, bs, bs], gate [nnz] or undefined.
Tensor bsmm_dx(const Tensor& dy, const Tensor& w, const LayoutPtr& layout, const Tensor& gate = Tensor());

namespace op {
/// Inputs dy [N, K], w [nnz, bs, bs], then gate [nnz] when `gated`; output dx [N, C]. The CPU
/// kernel runs one thread per (row tile, input block row r) and walks the row's blocks
/// k = row_ptr[r] .. row_ptr[r+1] (contiguous, in increasing block column) into a local buffer.
/// On CUDA: tensor cores for bf16/f16 (and f32 with TF32 allowed), the forward's kernels with W
/// transposed, see kernels/common/cuda/bsmm_tc.h, or the dense route where it pays
/// (kernels/common/cuda/bsmm_dense.h); deterministic (the same inputs give the same
/// bits on every run and in CUDA-graph replay).
///
/// Differentiable (it is linear in dy and in w): with G = d(dx) [N, C],
///   d(dy) = bsmm(G, w, layout, gate)                        (G·W over stored blocks)
///   dW[k] = gate[k]·P[k],   P = bsmm_dw(G, dy, layout)       (P[k] = G_rᵀ·dY_c)
///   dgate[k] = sum_ij P[k]_ij·W[k]_ij
/// so gradients of gradients (e.g. a gradcheck through bsmm's backward) work.
struct BsmmDx : OpBase {
  static constexpr const char* kName = "bsmm_dx";
  static constexpr unsigned kSaveInputs = 0b111;  // dy, w, gate
  struct Attrs {
    LayoutPtr layout;
    bool gated = false;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
