#pragma once

#include "core/op.h"

namespace tessera {

/// x with `value` wherever mask (u8, broadcastable to x's shape) is nonzero.
///   scores = masked_fill(scores, causal_mask, -INFINITY);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

namespace op {
/// out[i] = mask[i] ? value : x[i]; out has x's meta (any numeric dtype), mask broadcasts to
/// x's shape. Integer x needs a value its dtype holds exactly. Backward (reads the saved
/// mask only): dx = masked_fill(g, mask, 0); the mask gets no gradient.
struct MaskedFill : OpBase {
  static constexpr const char* kName = "masked_fill";
  static constexpr bool kInPlace = true;
  static constexpr unsigned kSaveInputs = 0b10;
  struct Attrs {
    double value = 0.0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
