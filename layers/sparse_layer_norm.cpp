#include "layers/sparse_layer_norm.h"

#include "kernels/ops.h"

namespace tessera {
namespace nn {

SparseLayerNorm::SparseLayerNorm(const SparseLayerNormOptions& options) : options_(options) {
  const int64_t dim = options.dim(), segments = options.segments();
  TS_CHECK(dim > 0 && segments >= 1, ValueError,
           "SparseLayerNorm: dim (" << dim << ") must be > 0 and segments (" << segments << ") >= 1");
  TS_CHECK(dim % segments == 0, ShapeError,
           "SparseLayerNorm: dim " << dim << " must be divisible by segments " << segments);
  TS_CHECK(options.eps() >= 0, ValueError, "SparseLayerNorm: eps must be >= 0, got " << options.eps());
  if (options.affine()) {
    gamma_ = register_parameter("gamma", ones({dim}, options.dtype()));
    beta_ = register_parameter("beta", zeros({dim}, options.dtype()));
  }
}

Tensor SparseLayerNorm::forward(const Tensor& x) const {
  TS_CHECK(x.dim() >= 1 && x.size(-1) == options_.dim(), ShapeError,
           "SparseLayerNorm: x " << x.meta() << " must have last dim " << options_.dim());
  return sparse_layer_norm(x, options_.segments(), gamma_, beta_, options_.eps(), options_.relu());
}

}  // namespace nn
}  // namespace tessera
