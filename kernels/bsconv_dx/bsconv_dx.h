// The input gradient of bsconv, which is also the transposed convolution (deconvolution): the
// layout's blocks used transposed, each output position of the forward scattering back to the
// input positions its taps read.
//
//   Tensor dx = bsconv_dx(dy, w, l, g, {T});   // dy [N, out…, K] -> dx [N, T, C]
//
// With in(o, t) as in bsconv.h:
//   dx[n, i, r·bs + i'] = Σ over stored blocks k of block row r (increasing k) and taps t in order,
//                         where an output position o has in(o, t) = i, of Σ_j dy[n, o, c·bs + j] · w[k, t, i', j]
// (input positions that no tap reads get zeros). A transposed convolution with stride s maps
// [N, out…, K] to [N, in…, C] with in the sizes given (in[d] is not fixed by out[d] when s > 1).
#pragma once

#include <vector>

#include "core/op.h"
#include "core/sparse/block_layout.h"
#include "kernels/common/conv_geometry.h"

namespace tessera {

/// dx [N, in…, C] from dy [N, out…, K] (out = g's output sizes for `in`) and w [nnz, kernel…, bs, bs]
/// (under autocast: bf16/f16 operands, an f32 dx).
Tensor bsconv_dx(const Tensor& dy, const Tensor& w, const LayoutPtr& layout, const ConvGeometry& g,
                 const std::vector<int64_t>& in);

namespace op {
/// Inputs dy [N, out…, K], w [nnz, kernel…, bs, bs]; output dx [N, in…, C] (dy's dtype, or f32 with
/// f32_output for bf16/f16 inputs). Deterministic (one sum per element in the order above). CPU:
/// tiles of 256 input rows per block row, the dy rows of each (block, tap) gathered for Eigen; CUDA:
/// a scalar kernel per element.
///
/// Backward (bilinear in dy and w, like bsconv): with H = d(dx),
///   d(dy) = bsconv(H, w)            d(w) = bsconv_dw(H, dy)
struct BsConvDx : OpBase {
  static constexpr const char* kName = "bsconv_dx";
  static constexpr unsigned kSaveInputs = 0b11;  // dy, w
  struct Attrs {
    LayoutPtr layout;
    ConvGeometry geometry;
    std::vector<int64_t> in;  ///< dx's spatial sizes
    bool f32_output = false;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
