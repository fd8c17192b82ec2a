// The weight gradient of bsconv on the layout's blocks only: per stored block k (block row r,
// block column c) and tap t, the product of the shifted inputs and the output gradients summed
// over every sample and output position.
//
//   Tensor dw = bsconv_dw(x, dy, l, g);   // x [N, in…, C], dy [N, out…, K] -> [nnz, kernel…, bs, bs]
//
//   dw[k, t, i, j] = Σ_n Σ_o x[n, in(o, t), r·bs + i] · dy[n, o, c·bs + j]   (o in order; padding: 0)
#pragma once

#include "core/op.h"
#include "core/sparse/block_layout.h"
#include "kernels/common/conv_geometry.h"

namespace tessera {

/// dw [nnz, kernel…, bs, bs] (under autocast: bf16/f16 operands, an f32 dw).
Tensor bsconv_dw(const Tensor& x, const Tensor& dy, const LayoutPtr& layout, const ConvGeometry& g);

namespace op {
/// Inputs x [N, in…, C], dy [N, out…, K] (out: g's output sizes for x); output dw [nnz, kernel…, bs,
/// bs] in x's dtype, or f32 with f32_output for bf16/f16 inputs (autocast's form: the sums are f32
/// and reach the f32 parameter's gradient unrounded). Deterministic: each element is one sum over
/// (n, o) in order. CPU: one task per (block, tap), tiles of 256 rows gathered for Eigen; CUDA: a
/// thread block per (block, tap), each thread owning fixed elements.
///
/// Backward (bilinear in x and dy): with H = d(dw),
///   d(x) = bsconv_dx(dy, H)          d(dy) = bsconv(x, H)
struct BsConvDw : OpBase {
  static constexpr const char* kName = "bsconv_dw";
  static constexpr unsigned kSaveInputs = 0b11;  // x, dy
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

}  // namespace tessera
