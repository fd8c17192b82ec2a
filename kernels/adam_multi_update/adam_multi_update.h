#pragma once

#include <vector>

#include "core/op.h"
#include "kernels/common/adam_step.h"

namespace tessera {

/// One Adam (coupled decay) or AdamW (decoupled) step on n parameters at once: returns
/// {p'_0 .. p'_{n-1}, m'_0 .. m'_{n-1}, v'_0 .. v'_{n-1}}. Element for element bitwise what
/// n adam_update calls with the same decay return (weight_decay[i] is parameter i's decay), in a
/// few launches instead of n. p, g, m, v: n tensors each (p[i], g[i], m[i], v[i] of one shape;
/// all of one floating dtype on one device); lr, step, grad_scale as for adam_update.
std::vector<Tensor> adam_multi_update(const std::vector<Tensor>& p, const std::vector<Tensor>& g,
                                      const std::vector<Tensor>& m, const std::vector<Tensor>& v, const Tensor& lr,
                                      const Tensor& step, AdamDecay decay, double beta1, double beta2,
                                      double eps, const std::vector<double>& weight_decay,
                                      const Tensor& grad_scale = Tensor());

namespace op {
/// The multi-tensor form of the fused Adam-family update (kernels/common/adam_step.h has the
/// math). Inputs (p_0..p_{n-1}, g_0.., m_0.., v_0.., lr [], step [][, grad_scale []]) ->
/// outputs (p'_0.., m'_0.., v'_0..), n = weight_decay.size() >= 1. Each parameter is checked
/// as adam_update checks its inputs; every p_i shares p_0's dtype and device.
/// CPU: the single-tensor kernel per parameter, in order. CUDA: one launch per 48 parameters,
/// their pointers in a table passed as a kernel parameter (no upload, capturable in a CUDA
/// graph); a block updates one chunk of one parameter, with that parameter's scalars.
/// In place like adam_update: p'_i, m'_i, v'_i may share the buffers of p_i, m_i, v_i.
/// Not differentiable.
struct AdamMultiUpdate : OpBase {
  static constexpr const char* kName = "adam_multi_update";
  static constexpr bool kInPlace = true;
  static constexpr bool kDifferentiable = false;
  static constexpr bool kHalfNative = true;  // the per-tensor CPU kernel widens bf16/f16 itself
  struct Attrs {
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    AdamDecay decay = AdamDecay::decoupled;
    std::vector<double> weight_decay;  // one per parameter; its size is n
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
