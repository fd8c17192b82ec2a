// The shared body of the Adam-family update ops (adam_update, adam_multi_update): argument
// checks and the fused CPU kernel of one parameter. The decay mode (Adam or AdamW) is an
// attribute of both ops.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tessera {

/// Where weight decay enters an Adam-family update (an attribute of adam_update and adam_multi_update).
enum class AdamDecay {
  coupled,    ///< Adam: g' = g + wd·p joins the gradient before the moments
  decoupled,  ///< AdamW: p' = p·(1 - lr·wd) - the Adam step
};

namespace detail {

struct AdamHyper {
  double beta1, beta2, eps, weight_decay;
};

/// Inputs (p, g, m, v, lr, step[, grad_scale]) -> (p', m', v'), all like p; grad_scale (optional)
/// is a 0-d f64 tensor. Checks named after `op`.
std::vector<TensorMeta> infer_adam_update(const char* op, const std::vector<TensorMeta>& in, const AdamHyper& h);

/// The fused elementwise update (bias corrections in f64) on tensors of any floating dtype
/// (bf16/f16 computed in f32, rounded once when stored). With a grad_scale s the gradient is
/// first g·s as mul(g, cast(s, T)) stores it. Outputs may alias p, m, v: element i of every
/// input is loaded before element i of any output is stored.
void adam_update_cpu(const char* op, const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                     const AdamHyper& h, AdamDecay decay);

}  // namespace detail
}  // namespace tessera
