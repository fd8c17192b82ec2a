#pragma once

#include "core/op.h"

namespace tessera {

/// Softmax over the last dim: y[..., j] = exp(x[..., j]) / sum_k exp(x[..., k]).
/// Numerically stable (the row max is subtracted first), so logits around 1e3 are fine.
///
///   Tensor p = softmax(logits);   // [N, V] -> [N, V], rows sum to 1
Tensor softmax(const Tensor& x);

namespace op {
/// y = softmax(x) over the last dim; x [..., C] floating -> y [..., C].
/// Backward (from the saved output, no kernel of its own):
///   dx = y · (g − sum(g·y, −1, keepdim))
/// since dy_j/dx_i = y_j (δ_ij − y_i).
struct Softmax : OpBase {
  static constexpr const char* kName = "softmax";
  static constexpr unsigned kSaveOutputs = 0b1;
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
