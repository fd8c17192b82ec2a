#pragma once

#include "core/op.h"
#include "core/sparse/block_layout.h"

namespace tessera {

/// Weight gradient of bsmm on the layout's blocks only: dw [nnz, bs, bs] with
/// dW[k] = X[:, r-block]ᵀ·dY[:, c-block] (r = block_row[k], c = block_col[k]).
/// x [N, C], dy [N, K] of the layout, one floating dtype. Ungated: bsmm's backward scales it by
/// the gate with ops.
Tensor bsmm_dw(const Tensor& x, const Tensor& dy, const LayoutPtr& layout);

/// The weight-gradient epilogues: acc + dW with acc [nnz, bs, bs] (a gradient summed over time
/// steps, β = 1), and dW in f32 from bf16/f16 x and dy (f32_output: f32 sums stored as they are,
/// no rounding to bf16 and cast back). acc has the result's dtype; undefined acc: dW alone.
Tensor bsmm_dw(const Tensor& x, const Tensor& dy, const LayoutPtr& layout, const Tensor& acc, bool f32_output);

namespace op {
/// Inputs x [N, C], dy [N, K], then acc [nnz, bs, bs] when `accumulate`; output dw [nnz, bs, bs]
/// (= acc + Xᵀ·dY on the blocks), in x's dtype or f32 with f32_output. The CPU kernel runs one
/// thread per stored block, each a [bs, N]·[N, bs] product written straight into its own output
/// block. On CUDA: tensor cores for bf16/f16 (and f32 with TF32 allowed), see
/// kernels/common/cuda/bsmm_tc.h; deterministic (sums over N in a fixed order, no atomics).
///
/// Differentiable (it is bilinear in x and dy, and the identity in acc): with G = d(dw),
///   d(x)   = bsmm_dx(dy, G, layout)     (dX_r = sum over k in row r of dY_c·G[k]ᵀ)
///   d(dy)  = bsmm(x, G, layout)         (dY_c = sum over k in column c of X_r·G[k])
///   d(acc) = G
/// (G cast to x's dtype first with f32_output).
struct BsmmDw : OpBase {
  static constexpr const char* kName = "bsmm_dw";
  static constexpr unsigned kSaveInputs = 0b11;  // x, dy
  struct Attrs {
    LayoutPtr layout;
    bool f32_output = false;
    bool accumulate = false;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
