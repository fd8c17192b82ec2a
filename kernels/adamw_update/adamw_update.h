#pragma once

#include <vector>

#include "core/op.h"

namespace tessera {

/// One AdamW step on a parameter (PyTorch semantics, decoupled weight decay): returns
/// {p', m', v'}. `lr` and `step` (the 1-based step number t) are 0-d f64 tensors; m and v are
/// the first and second moment estimates (zeros before the first step).
std::vector<Tensor> adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                                 const Tensor& lr, const Tensor& step, double beta1 = 0.9,
                                 double beta2 = 0.999, double eps = 1e-8, double weight_decay = 0.01);

/// Fused AdamW update, elementwise over p [*]:
///   m' = b1·m + (1 - b1)·g
///   v' = b2·v + (1 - b2)·g²
///   p' = p·(1 - lr·wd) - (lr / (1 - b1^t)) · m' / (sqrt(v') / sqrt(1 - b2^t) + eps)
/// i.e. p - lr·(mhat / (sqrt(vhat) + eps) + wd·p) with mhat = m'/(1 - b1^t), vhat = v'/(1 - b2^t),
/// in PyTorch's order (decay first, then the Adam step). Bias corrections are computed in f64.
/// Inputs (p, g, m, v [*], lr [], step []) -> outputs (p', m', v' [*]); p, g, m, v share one
/// floating meta, lr and step are f64. Computed in p's dtype.
/// In place: p', m', v' may share the buffers of p, m, v (the kernel reads element i of every
/// input before it writes element i of the outputs). Not differentiable.
struct AdamwUpdate : OpBase {
  static constexpr const char* kName = "adamw_update";
  static constexpr bool kInPlace = true;
  static constexpr bool kDifferentiable = false;
  struct Attrs {
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.01;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};

}  // namespace tessera
