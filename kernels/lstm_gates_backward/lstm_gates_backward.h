#pragma once

#include "core/op.h"

namespace tessera {

/// Gradients of lstm_gates from dh [N, H], dc [N, H] (the gradient reaching the cell output c
/// from later steps; zeros when c is unused), the saved activated gates [N, 4H] (i, f, o, u),
/// tanh_c [N, H] and c_prev [N, H]. Returns {dpre [N, 4H], dc_prev [N, H]}.
std::vector<Tensor> lstm_gates_backward(const Tensor& dh, const Tensor& dc, const Tensor& gates,
                                        const Tensor& tanh_c, const Tensor& c_prev);

namespace op {
/// Inputs dh, dc [N, H], gates [N, 4H], tanh_c, c_prev [N, H] (one floating dtype). With
/// h = o·tanh(c) and c = f·c_prev + i·u, the total gradient at c is
///   dc_t = dc + dh·o·(1 − tanh(c)²)
/// and, through the activations (σ' = s(1 − s), tanh' = 1 − t²),
///   dpre_i = dc_t·u·i(1 − i)         dpre_f = dc_t·c_prev·f(1 − f)
///   dpre_o = dh·tanh(c)·o(1 − o)     dpre_u = dc_t·i·(1 − u²)
///   dc_prev = dc_t·f
/// (forget_bias is a constant shift of pre_f: it is already inside f.) Not differentiable.
struct LstmGatesBackward : OpBase {
  static constexpr const char* kName = "lstm_gates_backward";
  static constexpr bool kDifferentiable = false;
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
