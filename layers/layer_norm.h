// nn::LayerNorm: layer normalization over the last dim with a learned scale and shift.
//
//   nn::LayerNorm ln(nn::LayerNormOptions(512).eps(1e-6));
//   Tensor h = ln.forward(x);   // x [N, 512] -> [N, 512]
//   Tensor b = ln.forward(x, DType::bf16);   // the same, rounded to bf16 (f32 x)
#pragma once

#include <cstdint>

#include "layers/module.h"

namespace tessera {
namespace nn {

/// Options of LayerNorm: normalized size, eps, learned affine on/off, parameter dtype.
struct LayerNormOptions {
  explicit LayerNormOptions(int64_t dim) : dim_(dim) {}
  LayerNormOptions& eps(double e) { eps_ = e; return *this; }
  LayerNormOptions& affine(bool on) { affine_ = on; return *this; }
  LayerNormOptions& dtype(DType t) { dtype_ = t; return *this; }
  int64_t dim() const { return dim_; }
  double eps() const { return eps_; }
  bool affine() const { return affine_; }
  DType dtype() const { return dtype_; }

 private:
  int64_t dim_;
  double eps_ = 1e-5;
  bool affine_ = true;
  DType dtype_ = DType::f32;
};

/// forward(x [..., dim]) = layer_norm(x, gamma, beta, eps) -> [..., dim]. Parameters (when
/// affine) "gamma" [dim] (ones) and "beta" [dim] (zeros); nothing random.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(const LayerNormOptions& options);

  /// ShapeError naming x and dim when x's last dim is not dim.
  Tensor forward(const Tensor& x) const;
  /// forward with y in dtype `out`: x's, or bf16/f16 for f32 x (bitwise cast(forward(x), out);
  /// for a product under autocast that would cast y anyway, see autocast::operand_dtype).
  Tensor forward(const Tensor& x, DType out) const;

  /// Undefined when !affine.
  const Tensor& gamma() const { return gamma_; }
  const Tensor& beta() const { return beta_; }
  const LayerNormOptions& options() const { return options_; }

 private:
  LayerNormOptions options_;
  Tensor gamma_, beta_;
};

}  // namespace nn
}  // namespace tessera
