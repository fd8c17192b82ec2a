#pragma once

#include "core/op.h"
#include "core/sparse/block_layout.h"

namespace tessera {

/// Weight gradient of bsmm on the layout's blocks only: dw [nnz, bs, bs] with
/// dW[k] = X[:, r-block]ᵀ·dY[:, c-block] (r = block_row[k], c = block_col[k]).
/// x [N, C], dy [N, K] of the layout, one floating dtype. Ungated: bsmm's backward scales it by
/// the gate with ops.
Tensor bsmm_dw(const Tensor& x, const Tensor& dy, const LayoutPtr& layout);

/// Inputs x [N, C], dy [N, K]; output dw [nnz, bs, bs]. The CPU kernel runs one thread per
/// stored block, each a [bs, N]·[N, bs] product written straight into its own output block.
///
/// Differentiable (it is bilinear in x and dy): with G = d(dw) [nnz, bs, bs],
///   d(x)  = bsmm_dx(dy, G, layout)     (dX_r = sum over k in row r of dY_c·G[k]ᵀ)
///   d(dy) = bsmm(x, G, layout)         (dY_c = sum over k in column c of X_r·G[k])
struct BsmmDw : OpBase {
  static constexpr const char* kName = "bsmm_dw";
  static constexpr unsigned kSaveInputs = 0b11;  // x, dy
  struct Attrs {
    LayoutPtr layout;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};

}  // namespace tessera
