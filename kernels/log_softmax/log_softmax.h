#pragma once

#include "core/op.h"

namespace tessera {

/// Log-softmax over the last dim: y[..., j] = x[..., j] − log(sum_k exp(x[..., k])).
/// Numerically stable (log-sum-exp with the row max subtracted).
Tensor log_softmax(const Tensor& x);

namespace op {
/// y = x − logsumexp(x) over the last dim; x [..., C] floating -> y [..., C].
/// Backward through the fused op log_softmax_backward(g, y) (its own kernel, so no exp op
/// is needed):  dx = g − exp(y) · sum(g, −1, keepdim), as dy_j/dx_i = δ_ij − softmax_i.
struct LogSoftmax : OpBase {
  static constexpr const char* kName = "log_softmax";
  static constexpr unsigned kSaveOutputs = 0b1;
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
