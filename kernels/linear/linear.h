#pragma once

#include "core/op.h"

namespace tessera {

/// Fully connected map y = x·W + b: x [N, K], W [K, M] (input-major, as nn::Linear stores it),
/// b [M] added to every row -> y [N, M]. Without b (undefined) it is matmul(x, W).
/// Under autocast (core/autocast.h) x and W are multiplied in bf16/f16 with f32 sums, b stays
/// f32 and is added in f32, and y comes back f32 (Linear's f32_output).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);

/// linear with y written in `out`: the dtype linear(x, w, b) gives, or, under autocast, the
/// autocast dtype, for a reader that takes the low dtype (attention's q, k, v): the f32 sums plus
/// the f32 b rounded once, bitwise cast(linear(x, w, b), out) (on CUDA through an f32 temporary:
/// cuBLASLt has no f32 bias for a bf16/f16 output); y's gradient then arrives in `out` and db is
/// summed in f32 (col_sum).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, DType out);

namespace op {
/// y[n, m] = Σ_k x[n, k]·W[k, m] + b[m]. On CUDA one cuBLASLt GEMM whose epilogue adds b
/// (no extra pass over y); the CPU kernel is Eigen's GEMM followed by the row broadcast.
/// dtypes: x, W, b and y share one dtype, except f32_output: x, W bf16/f16, b and y f32 (the
/// products are summed in f32 and b is added before the one rounding-free store), and f32_bias:
/// x, W and y bf16/f16, b f32 (added to the f32 sums before y's one rounding).
/// Backward, with G = dy (f32_output: G cast once to x's dtype for the two GEMMs):
///   dx = G·Wᵀ = matmul(G, W, false, true),   dW = xᵀ·G = matmul(x, G, true, false),
///   db = Σ_n G[n, :] = sum(dy, 0), in b's dtype (from dy itself, before any cast).
/// With f32_output, the cast of dy and db come from one pass over dy (cast_col_sum); with
/// f32_bias, db = col_sum(dy) in f32.
struct Linear : OpBase {
  static constexpr const char* kName = "linear";
  static constexpr unsigned kSaveInputs = 0b011;  // x, W (db needs only G)
  struct Attrs {
    bool f32_output = false;
    bool f32_bias = false;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
