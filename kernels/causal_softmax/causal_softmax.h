#pragma once

#include "core/op.h"

namespace tessera {

/// Causal softmax of raw attention scores: for x [..., T, S] (rows = queries t, columns = keys s)
///   y[..., t, s] = exp(scale·x[..., t, s] − m_t) / Σ_{s' <= t+S−T} exp(scale·x[..., t, s'] − m_t)
/// for s <= t + (S − T), and exactly 0 above (m_t = the row max of the visible scaled scores).
/// With S == T this is the usual lower-triangular mask; with S > T the last query sees every key.
///
///   Tensor s = matmul(q, k, false, true);                 // [B*H, T, T]
///   Tensor p = causal_softmax(s, 1.0 / std::sqrt(D));     // rows sum to 1 over s <= t
///   Tensor o = matmul(p, v);                              // [B*H, T, D]
Tensor causal_softmax(const Tensor& x, double scale = 1.0);

namespace op {
/// x [..., T, S] floating, S >= T, finite scale -> y [..., T, S] like x.
/// Backward from the saved output, through causal_softmax_backward(g, y, scale):
///   dx = scale · y ⊙ (g − Σ_s g ⊙ y)   (row sum over the visible keys; 0 where masked).
struct CausalSoftmax : OpBase {
  static constexpr const char* kName = "causal_softmax";
  static constexpr unsigned kSaveOutputs = 0b1;
  struct Attrs {
    double scale = 1.0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

namespace detail {
/// Checks x [..., T, S] (>= 2 dims, S >= T, floating) and a finite scale for op `op`
/// (ShapeError/DTypeError/ValueError naming op, x and the scale).
void check_causal_scores(const char* op, const TensorMeta& x, double scale, const char* what = "x");
}  // namespace detail

}  // namespace tessera
