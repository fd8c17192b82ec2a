#include "layers/layer_norm.h"

#include "kernels/ops.h"

namespace tessera {
namespace nn {

LayerNorm::LayerNorm(const LayerNormOptions& options) : options_(options) {
  const int64_t dim = options.dim();
  TS_CHECK(dim > 0, ValueError, "LayerNorm: dim must be > 0, got " << dim);
  TS_CHECK(options.eps() >= 0, ValueError, "LayerNorm: eps must be >= 0, got " << options.eps());
  if (options.affine()) {
    gamma_ = register_parameter("gamma", ones({dim}, options.dtype()));
    beta_ = register_parameter("beta", zeros({dim}, options.dtype()));
  }
}

Tensor LayerNorm::forward(const Tensor& x) const { return forward(x, x.dtype()); }

Tensor LayerNorm::forward(const Tensor& x, DType out) const {
  TS_CHECK(x.dim() >= 1 && x.size(-1) == options_.dim(), ShapeError,
           "LayerNorm: x " << x.meta() << " must have last dim " << options_.dim());
  if (out == x.dtype()) return layer_norm(x, gamma_, beta_, options_.eps());
  return layer_norm(x, gamma_, beta_, options_.eps(), out);
}

}  // namespace nn
}  // namespace tessera
