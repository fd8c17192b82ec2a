#pragma once

#include "core/op.h"
#include "kernels/cross_entropy/cross_entropy.h"

namespace tessera {

/// Gradient of cross_entropy(logits, targets, opts) w.r.t. logits, given the loss gradient
/// g ([] for mean/sum, [N] for none): dlogits [N, V].
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& g,
                              CrossEntropyOptions opts = {});

namespace op {
/// Inputs logits [N, V] floating, targets i32 [N], g ([] or [N], logits' dtype) -> dlogits [N, V]:
///   dlogits[i, j] = (softmax(logits_i)_j − [j == t_i]) · g_row(i)
/// with g_row = g / count (mean; count = non-ignored rows), g (sum), g[i] (none), and 0 for
/// rows whose target is ignore_index. Not differentiable.
struct CrossEntropyBackward : OpBase {
  static constexpr const char* kName = "cross_entropy_backward";
  static constexpr bool kDifferentiable = false;
  using Attrs = op::CrossEntropy::Attrs;
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
