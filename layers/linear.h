// nn::Linear: y = x·W + b over the last dim.
//
//   Generator gen(0);
//   nn::Linear fc(nn::LinearOptions(256, 1024).bias(false), gen);
//   Tensor y = fc.forward(x);   // x [N, 256] -> y [N, 1024]
#pragma once

#include <cstdint>
#include <optional>

#include "core/random.h"
#include "layers/module.h"

namespace tessera {
namespace nn {

/// Options of Linear: sizes, bias on/off, parameter dtype.
struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features) : in_(in_features), out_(out_features) {}
  LinearOptions& bias(bool on) { bias_ = on; return *this; }
  LinearOptions& dtype(DType t) { dtype_ = t; return *this; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  bool bias() const { return bias_; }
  DType dtype() const { return dtype_; }

 private:
  int64_t in_, out_;
  bool bias_ = true;
  DType dtype_ = DType::f32;
};

/// Fully connected layer: forward(x [..., in]) = matmul(x, weight) + bias -> [..., out].
/// The weight is stored input-major, weight [in, out] (the transpose of PyTorch's [out, in]),
/// so the forward is one plain matmul on activations [N, C]. Parameters "weight" [in, out] and
/// "bias" [out] (when options.bias()), both initialized uniform(-1/sqrt(in), 1/sqrt(in)) from
/// `gen` like PyTorch's default.
class Linear : public Module {
 public:
  explicit Linear(const LinearOptions& options, Generator& gen = default_generator());

  /// x [..., in] -> [..., out]; ShapeError naming both shapes when x's last dim is not in.
  Tensor forward(const Tensor& x) const;
  /// forward with y written in `out`: forward(x)'s dtype, or under autocast the autocast dtype
  /// (for a reader of the low dtype; see linear(x, w, b, out)).
  Tensor forward(const Tensor& x, DType out) const;

  const Tensor& weight() const { return weight_; }
  /// Undefined when the layer has no bias.
  const Tensor& bias() const { return bias_; }
  const LinearOptions& options() const { return options_; }

 private:
  Tensor product(const Tensor& x, std::optional<DType> out) const;  // forward, forward(x, out)
  LinearOptions options_;
  Tensor weight_, bias_;
};

}  // namespace nn
}  // namespace tessera
