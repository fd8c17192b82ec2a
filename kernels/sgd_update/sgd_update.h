#pragma once

#include <vector>

#include "core/op.h"

namespace tessera {

/// One SGD step on a parameter (PyTorch semantics): returns {p', buf'}. `lr` and `step` (the
/// 1-based step number t) are 0-d f64 tensors; `buf` is the momentum buffer (read only when
/// momentum != 0, and then replaced by g' at t == 1).
std::vector<Tensor> sgd_update(const Tensor& p, const Tensor& g, const Tensor& buf, const Tensor& lr,
                               const Tensor& step, double momentum = 0.0, double dampening = 0.0,
                               double weight_decay = 0.0, bool nesterov = false);

namespace op {
/// Fused SGD update, elementwise over p [*]:
///   g'   = g + wd·p
///   buf' = momentum == 0 ? buf : (t == 1 ? g' : momentum·buf + (1 - dampening)·g')
///   d    = momentum == 0 ? g' : (nesterov ? g' + momentum·buf' : buf')
///   p'   = p - lr·d
/// Inputs (p, g, buf [*], lr [], step []) -> outputs (p' [*], buf' [*]); p, g, buf share one
/// floating meta, lr and step are f64. Computed in p's dtype.
/// In place: p' may share p's buffer and buf' may share buf's (the kernel reads element i of
/// every input before it writes element i of the outputs). Not differentiable.
struct SgdUpdate : OpBase {
  static constexpr const char* kName = "sgd_update";
  static constexpr bool kInPlace = true;
  static constexpr bool kDifferentiable = false;
  struct Attrs {
    double momentum = 0.0;
    double dampening = 0.0;
    double weight_decay = 0.0;
    bool nesterov = false;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
