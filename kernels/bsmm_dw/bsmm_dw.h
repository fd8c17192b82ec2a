#pragma once

#include <utility>

#include "core/op.h"
#include "core/sparse/block_layout.h"

namespace tessera {

/// Weight gradient of bsmm on the layout's blocks only: dw [nnz, bs, bs] with
/// dW[k] = X[:, r-block]ᵀ·dY[:, c-block] (r = block_row[k], c = block_col[k]).
/// x [N, C], dy [N, K] of the layout, one floating dtype.
Tensor bsmm_dw(const Tensor& x, const Tensor& dy, const LayoutPtr& layout);

/// The weight-gradient epilogues: acc + dW with acc [nnz, bs, bs] (a gradient summed over time
/// steps, β = 1), and dW in f32 from bf16/f16 x and dy (f32_output: f32 sums stored as they are,
/// no rounding to bf16 and cast back). acc has the result's dtype; undefined acc: dW alone.
Tensor bsmm_dw(const Tensor& x, const Tensor& dy, const LayoutPtr& layout, const Tensor& acc, bool f32_output);

/// The weight and gate gradients of a gated bsmm in one op (the gate epilogue): with
/// P[k] = X_rᵀ·dY_c,
///   dw[k] = gate[k]·P[k]            [nnz, bs, bs]
///   dgate[k] = sum_ij P[k]_ij·W[k]_ij   [nnz]
/// both from P's f32 (f64) sums, before any rounding to the output dtype. w [nnz, bs, bs] and
/// gate [nnz] in x's dtype; f32_output: both results f32 (bf16/f16 inputs). Returns {dw, dgate}.
std::pair<Tensor, Tensor> bsmm_dw_gated(const Tensor& x, const Tensor& dy, const Tensor& w, const Tensor& gate,
                                        const LayoutPtr& layout, bool f32_output);

namespace op {
/// Inputs x [N, C], dy [N, K], then w [nnz, bs, bs] and gate [nnz] when `gated`, then
/// acc [nnz, bs, bs] when `accumulate`. Outputs dw [nnz, bs, bs] = acc + gate·P on the blocks
/// (P[k] = X_rᵀ·dY_c; gate 1 when ungated), then dgate [nnz] = sum over each block of P ⊙ w when
/// gated (the accumulate mode adds to dw only); in x's dtype, or f32 with f32_output. The CPU
/// kernel runs one thread per stored block, each a [bs, N]·[N, bs] product written straight into
/// its own output block. On CUDA: tensor cores for bf16/f16 (and f32 with TF32 allowed), see
/// kernels/common/cuda/bsmm_tc.h, with the gate and its gradient in the kernels' epilogue (or
/// the dense route where it pays: P = Xᵀ·dY by cuBLAS in f32, the blocks gathered from it,
/// kernels/common/cuda/bsmm_dense.h);
/// deterministic (sums over N, and over each block for dgate, in a fixed order, no atomics).
///
/// Differentiable. With G = d(dw) (and H = d(dgate) when gated), Q = gate·G + H·w per block:
///   d(x)    = bsmm_dx(dy, Q, layout)    (dX_r = sum over k in row r of dY_c·Q[k]ᵀ)
///   d(dy)   = bsmm(x, Q, layout)        (dY_c = sum over k in column c of X_r·Q[k])
///   d(w)    = H·P,   d(gate) = sum over each block of P ⊙ G   (P recomputed)
///   d(acc)  = G
/// (G, H cast to x's dtype first with f32_output).
struct BsmmDw : OpBase {
  static constexpr const char* kName = "bsmm_dw";
  static constexpr unsigned kSaveInputs = 0b1111;  // x, dy, then w, gate (gated; acc otherwise, unread)
  struct Attrs {
    LayoutPtr layout;
    bool f32_output = false;
    bool accumulate = false;
    bool gated = false;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
