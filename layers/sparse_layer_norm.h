// nn::SparseLayerNorm: layer norm over `segments` independent feature groups of the last dim
// (aligned with a block-sparse layer's blocks), with an optional fused ReLU.
//
//   nn::SparseLayerNorm ln(nn::SparseLayerNormOptions(1024, 8).relu(true));   // 8 groups of 128
//   Tensor h = ln.forward(x);   // x [N, 1024] -> max(norm_per_group(x)·gamma + beta, 0)
#pragma once

#include <cstdint>

#include "layers/module.h"

namespace tessera {
namespace nn {

/// Options of SparseLayerNorm: normalized size, number of groups, eps, affine, fused ReLU, dtype.
struct SparseLayerNormOptions {
  SparseLayerNormOptions(int64_t dim, int64_t segments) : dim_(dim), segments_(segments) {}
  SparseLayerNormOptions& eps(double e) { eps_ = e; return *this; }
  SparseLayerNormOptions& affine(bool on) { affine_ = on; return *this; }
  SparseLayerNormOptions& relu(bool on) { relu_ = on; return *this; }
  SparseLayerNormOptions& dtype(DType t) { dtype_ = t; return *this; }
  int64_t dim() const { return dim_; }
  int64_t segments() const { return segments_; }
  double eps() const { return eps_; }
  bool affine() const { return affine_; }
  bool relu() const { return relu_; }
  DType dtype() const { return dtype_; }

 private:
  int64_t dim_, segments_;
  double eps_ = 1e-5;
  bool affine_ = true;
  bool relu_ = false;
  DType dtype_ = DType::f32;
};

/// forward(x [..., dim]) = sparse_layer_norm(x, segments, gamma, beta, eps, relu) -> [..., dim]:
/// each of the `segments` contiguous groups of dim/segments features is normalized on its own.
/// Parameters (when affine) "gamma" [dim] (ones) and "beta" [dim] (zeros).
class SparseLayerNorm : public Module {
 public:
  /// ValueError unless dim > 0 and segments >= 1; ShapeError unless dim % segments == 0.
  explicit SparseLayerNorm(const SparseLayerNormOptions& options);

  /// ShapeError naming x and dim when x's last dim is not dim.
  Tensor forward(const Tensor& x) const;

  /// Undefined when !affine.
  const Tensor& gamma() const { return gamma_; }
  const Tensor& beta() const { return beta_; }
  const SparseLayerNormOptions& options() const { return options_; }

 private:
  SparseLayerNormOptions options_;
  Tensor gamma_, beta_;
};

}  // namespace nn
}  // namespace tessera
