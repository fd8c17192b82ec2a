#pragma once

#include <utility>

#include "core/op.h"

namespace tessera {

/// The fused elementwise part of an LSTM step. `pre` [N, 4H] holds the gate pre-activations
/// in the order (i, f, o, u) along the last dim, `c_prev` [N, H] the previous cell state:
///   i = σ(pre_i),  f = σ(pre_f + forget_bias),  o = σ(pre_o),  u = tanh(pre_u)
///   c = f ⊙ c_prev + i ⊙ u,   h = o ⊙ tanh(c)
/// Returns {h [N, H], c [N, H]}.
///
///   auto [h, c] = lstm_gates(add(x_proj, matmul(h_prev, w_h)), c_prev, 1.0);
std::pair<Tensor, Tensor> lstm_gates(const Tensor& pre, const Tensor& c_prev, double forget_bias = 0.0);

namespace op {
/// Inputs pre [N, 4H], c_prev [N, H] (same floating dtype); attr forget_bias (finite).
/// Outputs h [N, H], c [N, H], and, saved for backward (the public function hides them):
/// gates [N, 4H] = (i, f, o, u) after their activations, and tanh_c [N, H] = tanh(c).
/// Backward through lstm_gates_backward(dh, dc, gates, tanh_c, c_prev) -> dpre, dc_prev (see
/// there for the math); gradients arriving at gates/tanh_c are ignored (they are internal).
struct LstmGates : OpBase {
  static constexpr const char* kName = "lstm_gates";
  static constexpr unsigned kSaveInputs = 0b10;     // c_prev
  static constexpr unsigned kSaveOutputs = 0b1100;  // gates, tanh_c
  struct Attrs {
    double forget_bias = 0.0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
