// Backpropagation through time of lstm_recurrence: the gate pre-activation gradients of every
// step and the state gradients at the sequence's start, in one op (on the GPU one persistent
// kernel, as the forward). W_h's gradient is one product over all steps afterwards (see
// op::LstmRecurrence::backward).
#pragma once

#include <vector>

#include "core/op.h"
#include "core/sparse/block_layout.h"

namespace tessera {

/// From lstm_recurrence's outputs' gradients dy [T, B, H], dhT, dcT [B, H] (undefined: zeros),
/// its saved gates [T, B, 4H] and cells [T, B, H] (compute type), c0 [B, H], wh and layout.
/// Returns {dpre [T, B, 4H], dh0 [B, H], dc0 [B, H]} in c0's dtype.
std::vector<Tensor> lstm_recurrence_backward(const Tensor& dy, const Tensor& dhT, const Tensor& dcT,
                                             const Tensor& gates, const Tensor& cells, const Tensor& c0,
                                             const Tensor& wh, const LayoutPtr& layout);

namespace op {
/// Inputs dy [T, B, H], dhT, dcT [B, H], gates [T, B, 4H], cells [T, B, H], c0 [B, H], wh; attr
/// layout (null: dense). Steps t = T−1 … 0, with dh_rec = dpre_{t+1}·W_hᵀ (dhT at t = T−1) and
/// the activated gates (i, f, o, u) of step t:
///   dh = dy_t + dh_rec,   dc = dc_next + dh·o·(1 − tanh²(c_t))
///   dpre_t = (dc·u·i(1−i),  dc·c_{t−1}·f(1−f),  dh·tanh(c_t)·o(1−o),  dc·i·(1−u²))
///   dc_next = dc·f
/// then dh0 = dpre_0·W_hᵀ and dc0 = dc_next (c_{−1} = c0). Not differentiable. CUDA: bf16/f16
/// when lstm_recurrence_fused says so, as the forward.
struct LstmRecurrenceBackward : OpBase {
  static constexpr const char* kName = "lstm_recurrence_backward";
  static constexpr bool kDifferentiable = false;
  struct Attrs {
    LayoutPtr layout;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
