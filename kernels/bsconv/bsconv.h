// Block-sparse convolution: channels connected by a BlockLayout over (C in, K out), each stored
// block holding a dense filter over the taps. Activations are channels last (DESIGN.md):
// x [N, T, C] (1-D), [N, H, W, C] (2-D) or [N, D, H, W, C] (3-D).
//
//   LayoutPtr l = random_layout(256, 256, 32, 0.25, /*seed=*/1);
//   ConvGeometry g = conv_geometry({T}, {3}, {1}, {2}, ConvPadding::causal);  // kernel 3, dilation 2
//   Tensor w = normal({l->nnz(), 3, 32, 32}, 0.0, 0.02).requires_grad_();     // [nnz, kernel…, bs, bs]
//   Tensor y = bsconv(x, w, l, g);                                            // [N, T, 256] -> [N, T, 256]
//
// The math, with positions and taps as in conv_geometry.h (o: output position, t: tap, in(o, t):
// the input position it reads, or padding):
//   y[n, o, c·bs + j] = Σ over stored blocks k of block column c (block row r, increasing) and over
//                       taps t in order of Σ_i x[n, in(o, t), r·bs + i] · w[k, t, i, j]
// (padding reads zeros). So a convolution is a sum over taps of block-sparse products (bsmm) of
// shifted inputs; a 1×1 filter is bsmm itself.
#pragma once

#include <vector>

#include "core/op.h"
#include "core/sparse/block_layout.h"
#include "kernels/common/conv_geometry.h"

namespace tessera {

/// y [N, out…, K] from x [N, in…, C] (C = layout->in_features(), K = layout->out_features()) and
/// w [nnz, kernel…, bs, bs]; one floating dtype (under autocast: bf16/f16 operands, an f32 y).
Tensor bsconv(const Tensor& x, const Tensor& w, const LayoutPtr& layout, const ConvGeometry& g);

namespace op {
/// Forward of the block-sparse convolution. Inputs x [N, in…, C], w [nnz, kernel…, bs, bs];
/// output y [N, out…, K] (x's dtype, or f32 with f32_output for bf16/f16 inputs). Deterministic:
/// every output element is one sum in the order above, on every device. CPU: tiles of 256 output
/// rows (n, o) per output block column, the shifted input rows of each (block, tap) gathered and
/// multiplied by Eigen. CUDA: a scalar kernel (f32 sums for bf16/f16) per output element.
///
/// Backward, with G = dY [N, out…, K]:
///   dX = bsconv_dx(G, w)          (the transposed convolution: dX[n, i, r·bs + i'] = Σ over blocks
///                                   of row r, taps t and the o with in(o, t) = i of G·wᵀ)
///   dW[k, t] = Σ_{n, o} x[n, in(o, t), r-block]ᵀ · G[n, o, c-block]   (bsconv_dw)
struct BsConv : OpBase {
  static constexpr const char* kName = "bsconv";
  static constexpr unsigned kSaveInputs = 0b11;  // x, w
  struct Attrs {
    LayoutPtr layout;
    ConvGeometry geometry;
    bool f32_output = false;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

namespace detail {

/// Output rows (n, o) per CPU task of the convolution kernels (fixed: results do not depend on
/// the thread count).
constexpr int64_t kConvRowTile = 256;

/// Checks shared by bsconv, bsconv_dx and bsconv_dw (each throws one line naming `op`): a layout is
/// set; the geometry has 1-3 dimensions; w is [nnz, kernel…, bs, bs] in `a`'s dtype.
void bsconv_check_setup(const char* op, const LayoutPtr& layout, const ConvGeometry& g);
void bsconv_check_weight(const char* op, const TensorMeta& w, const TensorMeta& a, const BlockLayout& layout,
                         const ConvGeometry& g);
/// `a` [N, spatial…, channels] (floating, dims + 2 axes, `channels` last); returns its spatial sizes.
std::vector<int64_t> bsconv_check_activation(const char* op, const TensorMeta& a, const char* what,
                                             int64_t channels, const ConvGeometry& g);
/// [nnz, kernel…, bs, bs].
Shape bsconv_weight_shape(const BlockLayout& layout, const ConvGeometry& g);

}  // namespace detail

}  // namespace tessera
