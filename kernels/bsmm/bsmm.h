// Block-sparse matrix multiply: Y = X·W where W [C, K] stores only the bs×bs blocks of a
// BlockLayout, as w [nnz, bs, bs] (block k covers W[r*bs:(r+1)*bs, c*bs:(c+1)*bs] with
// r = block_row[k], c = block_col[k]).
//
//   LayoutPtr l = random_layout(1024, 1024, 32, 0.1, /*seed=*/7);
//   Tensor w = normal({l->nnz(), 32, 32}, 0.0, 0.02).requires_grad_();
//   Tensor y = bsmm(x, w, l);                // x [N, 1024] -> y [N, 1024]
//   Tensor z = bsmm(x, w, l, gate);          // gate [nnz]: block k scaled by gate[k]
//   Tensor v = bsmm(x, w, l, Tensor(), b);   // b [1024] added to every row, in the product's epilogue
#pragma once

#include "core/op.h"
#include "core/sparse/block_layout.h"

namespace tessera {

/// y [N, K] with Y[:, c-block] = sum over stored blocks k of column c of gate[k]·X[:, r-block]·W[k]
/// (gate[k] = 1 without a gate), plus bias[K] on every row when one is given. x [N, C] with
/// C = layout->in_features(), w [nnz, bs, bs], gate [nnz] or undefined, bias [K] or undefined; one
/// floating dtype. Output block columns with no stored block are zero (the bias, with one). Under
/// autocast the bias stays f32 and is added to the f32 sums (as linear's is).
Tensor bsmm(const Tensor& x, const Tensor& w, const LayoutPtr& layout, const Tensor& gate = Tensor(),
            const Tensor& bias = Tensor());

/// bsmm with y written in `out`: the dtype bsmm(x, w, layout, gate, bias) gives, or, under
/// autocast, the autocast dtype, for a reader that takes the low dtype (attention's q, k, v): the
/// f32 sums plus the f32 bias rounded once, bitwise cast(bsmm(...), out) without the f32 tensor;
/// y's gradient then arrives in `out` and the bias gradient is summed in f32 (col_sum).
Tensor bsmm(const Tensor& x, const Tensor& w, const LayoutPtr& layout, const Tensor& gate, const Tensor& bias,
            DType out);

namespace op {
/// Forward of the block-sparse matmul. Inputs x [N, C], w [nnz, bs, bs], then gate [nnz] when
/// `gated`, then bias [K] (in y's dtype, or f32 with f32_bias) when `biased`; output y [N, K]
/// (in x's dtype, or f32 with f32_output). The bias is added to the sums in the kernels' epilogue (no pass over y).
/// The CPU kernel runs one thread per (row tile, output block column): each output block is
/// summed in a local buffer in increasing block-row order (deterministic, no atomics). On CUDA:
/// tensor cores for bf16/f16 (and f32 with TF32 allowed), see kernels/common/cuda/bsmm_tc.h for
/// which kernel runs, or, where those would be slower than the dense product, cuBLAS on the
/// blocks laid out densely (kernels/common/cuda/bsmm_dense.h: the dense route); deterministic too
/// (the same inputs give the same bits on every run and in CUDA-graph replay).
///
/// Backward, with G = dY [N, K]:
///   dX = bsmm_dx(G, w, layout, gate)                       (dX_r = sum_k gate[k]·G_c·W[k]ᵀ)
///   dW[k] = gate[k]·P[k],   P[k] = X_rᵀ·G_c
///   dgate[k] = sum_ij P[k]_ij·W[k]_ij
///   dbias = Σ_n G[n, :]     (with f32_output: one pass over G for the cast and db, cast_col_sum;
///                            with f32_bias: summed in f32 from the bf16/f16 G, col_sum)
/// dW (bsmm_dw) and, when gated, dW and dgate together (bsmm_dw_gated: the gate and its gradient
/// in the dW kernels' epilogue, from P's f32 sums). With
/// bf16/f16 operands whose w is a cast of an f32 tensor (autocast), P is computed and kept in f32
/// and dW (and dgate, where the gate is such a cast too) come back in f32
/// (BackwardContext::input_grad_may_be_f32).
struct Bsmm : OpBase {
  static constexpr const char* kName = "bsmm";
  static constexpr unsigned kSaveInputs = 0b111;  // x, w, gate
  struct Attrs {
    LayoutPtr layout;
    bool gated = false;
    /// bf16/f16 operands, an f32 y (autocast's form: the sums are f32 either way; this skips
    /// rounding y to bf16 and a cast pass back).
    bool f32_output = false;
    bool biased = false;  ///< a bias [K] follows the gate (or w) in the inputs
    /// bf16/f16 operands and y with an f32 bias (autocast's form for a reader of the low dtype):
    /// the bias is added to the f32 sums before y's one rounding.
    bool f32_bias = false;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

namespace detail {

/// Rows of X / dY per CPU task in bsmm and bsmm_dx (fixed, so results do not depend on threads).
constexpr int64_t kBsmmRowTile = 256;

/// Shape-rule checks shared by bsmm, bsmm_dx and bsmm_dw (each throws naming `op`):
/// a layout is set; `a` [N, features] is 2-D floating with `features` columns (`what` names it);
/// w is [nnz, bs, bs] of the layout in a's dtype; gate is [nnz] in a's dtype.
void bsmm_check_layout(const char* op, const LayoutPtr& layout);
void bsmm_check_2d(const char* op, const TensorMeta& a, const char* what, int64_t features, const char* fname,
                   const BlockLayout& layout);
void bsmm_check_weight(const char* op, const TensorMeta& w, const TensorMeta& a, const BlockLayout& layout);
void bsmm_check_gate(const char* op, const TensorMeta& gate, const TensorMeta& a, const BlockLayout& layout);

/// The weight and gate gradients shared by bsmm and bsmm_dx (both bilinear in (a, b) and w):
/// with P[k] = A_rᵀ·B_c, returns {gate·P (or P when ungated), sum over each block of P ⊙ w
/// (undefined when ungated)}, each only when its input needs it, from one bsmm_dw or
/// bsmm_dw_gated call. `ctx` tells which of w (input 1) and gate (input 2) may take an f32
/// gradient (BackwardContext::input_grad_may_be_f32): for bf16/f16 operands, that one comes back
/// in f32 straight from the kernel (no rounding to bf16 and cast back).
std::pair<Tensor, Tensor> bsmm_weight_gate_grads(const Tensor& a, const Tensor& b, const Tensor& w,
                                                 const Tensor& gate, const LayoutPtr& layout,
                                                 const BackwardContext& ctx);

}  // namespace detail

}  // namespace tessera
