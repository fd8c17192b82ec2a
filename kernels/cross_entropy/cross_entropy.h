#pragma once

#include <cstdint>

#include "core/op.h"

namespace tessera {

/// How a per-row loss is reduced.
enum class Reduction { none, mean, sum };

/// Options of cross_entropy, with chainable setters:
///   cross_entropy(logits, targets, CrossEntropyOptions().ignore_index(0).reduction(Reduction::sum));
struct CrossEntropyOptions {
  int32_t ignore_index_ = -100;  ///< rows whose target equals this add no loss and no gradient
  Reduction reduction_ = Reduction::mean;

  CrossEntropyOptions& ignore_index(int32_t i) { ignore_index_ = i; return *this; }
  CrossEntropyOptions& reduction(Reduction r) { reduction_ = r; return *this; }
};

/// Softmax cross entropy of `logits` [N, V] against class indices `targets` (i32 [N]), fused:
/// loss_i = logsumexp(logits_i) − logits_i[targets_i]. mean: averaged over the rows whose
/// target is not ignore_index (0 when every row is ignored); sum: summed; none: [N] with 0
/// at ignored rows. A target outside [0, V) that is not ignore_index is a ValueError (on the
/// GPU, which does not wait for the targets, it makes that row's loss and gradient NaN, and the
/// ValueError comes at the next host wait such as item(): core/cuda/index_errors.cuh).
///
///   Tensor loss = cross_entropy(logits, targets);   // scalar
///   loss.backward();
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions opts = {});

namespace op {
/// Inputs logits [N, V] floating, targets [N] i32 -> loss [] (mean, sum) or [N] (none), in
/// logits' dtype; log-sum-exp accumulated in double. Backward through the fused op
/// cross_entropy_backward(logits, targets, g): dlogits = (softmax(logits) − onehot(target))·g_row.
struct CrossEntropy : OpBase {
  static constexpr const char* kName = "cross_entropy";
  static constexpr unsigned kSaveInputs = 0b11;
  struct Attrs {
    int32_t ignore_index = -100;
    Reduction reduction = Reduction::mean;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

namespace detail {
/// Shape rule shared by cross_entropy and cross_entropy_backward: logits [N, V] floating
/// (V > 0), targets i32 [N]. `op` names the caller in messages.
void check_cross_entropy_args(const char* op, const TensorMeta& logits, const TensorMeta& targets);
/// Throws ValueError naming `op`, the first bad target, its row and V unless every target
/// is in [0, V) or equals ignore_index. Reads data: called by kernels before their loops.
void check_cross_entropy_targets(const char* op, const Tensor& targets, int64_t v, int32_t ignore_index);
}  // namespace detail

}  // namespace tessera
