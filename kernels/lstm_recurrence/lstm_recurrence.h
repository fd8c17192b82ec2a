// The recurrence of a dense or block-sparse LSTM over a whole sequence in one op: every step's
// recurrent product, gate nonlinearities and cell update, from the input terms of all steps
// (computed beforehand as one large product, outside the recurrence).
//
//   Tensor gx = bsmm(x_all, wx, wx_layout);                          // [T*B, 4H], then [T, B, 4H]
//   auto [y, h, c] = lstm_recurrence(reshape(gx, {T, B, 4 * H}), h0, c0, wh, wh_layout, 1.0, bias);
//
// On the GPU one persistent kernel runs all T steps: each thread block keeps its slice of W_h
// (the four gate columns of its hidden units) resident in shared memory, reads h_{t-1} from L2
// each step, and the blocks meet at a grid-wide barrier between steps (a cooperative launch, so
// the grid never waits on blocks that cannot be resident). See kernels/lstm_recurrence/lstm_recurrence.cu.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/op.h"
#include "core/sparse/block_layout.h"

namespace tessera {

/// gx [T, B, 4H]: the input terms x_t·W_x of every step, gates in the order (i, f, o, u);
/// h0, c0 [B, H]; wh the recurrent weight W_h [H, 4H]: dense [H, 4H] (layout null) or the blocks
/// [nnz, bs, bs] of `layout` ([H, 4H], bs 8..64); bias b [4H] or undefined (none; gx may hold
/// it then). One floating dtype. For t = 0 … T−1:
///   pre = gx_t + b + h_{t−1}·W_h,   i, f, o = σ(pre_i), σ(pre_f + forget_bias), σ(pre_o),  u = tanh(pre_u)
///   c_t = f ⊙ c_{t−1} + i ⊙ u,   h_t = o ⊙ tanh(c_t)
/// Returns {y [T, B, H] (every h_t), hT, cT [B, H]}. The same math as nn::LSTMCell's steps.
/// Under autocast f32 operands are cast to the autocast dtype and y, hT, cT come back in f32
/// (the cell state is carried in f32 inside the op either way).
///
/// With x [T·B, C], wx and x_layout (the input projection gx = bsmm(x, wx) that the caller ran with
/// wx detached, [C, 4H] in blocks), the op's backward also gives wx its gradient dW_x = xᵀ·dpre, in
/// one launch with dW_h (bsmm_dw_pair: dpre read once; nn::LSTM where bsmm_dw_pair_fused says so);
/// x gets none from here (bsmm's backward gives it dx).
std::tuple<Tensor, Tensor, Tensor> lstm_recurrence(const Tensor& gx, const Tensor& h0, const Tensor& c0,
                                                   const Tensor& wh, const LayoutPtr& layout = nullptr,
                                                   double forget_bias = 0.0, const Tensor& bias = Tensor(),
                                                   const Tensor& x = Tensor(), const Tensor& wx = Tensor(),
                                                   const LayoutPtr& x_layout = nullptr);

/// Whether the GPU kernel takes this problem (CUDA builds; false on the CPU, where the op always
/// runs): bf16 or f16 (after autocast), B ≤ 64, H a multiple of 64 (dense) or of the block size,
/// a layout whose four gate columns of each per-gate block column store the same block rows
/// (nn::LSTM's tiled layouts do), and W_h's slices fitting in the SMs' shared memory
/// (a persistent grid of at most one block per SM and group of hidden units).
bool lstm_recurrence_fused(const TensorMeta& gx, int64_t hidden, const LayoutPtr& layout);

namespace op {
/// Inputs gx [T, B, 4H], h0, c0 [B, H], wh ([H, 4H] dense or [nnz, bs, bs] of layout) and
/// optionally bias [4H] (added to every row of gx, inside the kernel on the GPU: no pass over
/// gx), then with attr x_layout x [T·B, C] and wx [nnz_x, bs, bs] (read by the backward only);
/// attrs layout (null: dense) and forget_bias. Outputs y [T, B, H], hT, cT [B, H] (gx's dtype) and,
/// saved for backward (the public function hides them), the activated gates [T, B, 4H] and cells
/// c_t [T, B, H] in the compute type (f64 for f64, f32 otherwise).
/// CPU: step by step (Eigen products). CUDA: bf16/f16 only, when lstm_recurrence_fused says
/// so (NotImplementedError naming the reason otherwise); deterministic.
///
/// Backward (lstm_recurrence_backward gives dpre [T, B, 4H], dh0, dc0 through time), then
///   dgx = dpre,   dW_h = Σ_t h_{t−1}ᵀ·dpre_t = Hprevᵀ·dPre over all T·B rows at once
/// (h_{−1} = h0; a dense matmul, or bsmm_dw on the layout's blocks: f32 sums, deterministic),
///   db = Σ over all T·B rows of dpre (a column sum),
///   with x_layout: dW_x = xᵀ·dpre on its blocks, with dW_h's Hprev part as one bsmm_dw_pair.
struct LstmRecurrence : OpBase {
  static constexpr const char* kName = "lstm_recurrence";
  static constexpr unsigned kSaveInputs = 0b1111110;  // h0, c0, wh, then (bias,) x, wx with x_layout
  static constexpr unsigned kSaveOutputs = 0b11001;   // y, gates, cells
  struct Attrs {
    LayoutPtr layout;
    double forget_bias = 0.0;
    LayoutPtr x_layout;  ///< set: inputs x, wx follow (W_x's gradient from the backward)
  };
  /// Whether the inputs include a bias: 5 (or 7 with x_layout).
  static bool has_bias(size_t inputs, const Attrs& a) { return inputs == (a.x_layout ? 7u : 5u); }
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

namespace detail {

/// Sizes of an lstm_recurrence problem.
struct RecurrenceDims {
  int64_t steps, batch, hidden;
};

/// The checks of lstm_recurrence's inputs gx, h0, c0, wh, layout and bias (null: none), naming
/// `op`; the sizes.
RecurrenceDims check_recurrence_inputs(const char* op, const TensorMeta& gx, const TensorMeta& h0,
                                       const TensorMeta& c0, const TensorMeta& wh, const LayoutPtr& layout,
                                       const TensorMeta* bias = nullptr);

/// The compute type of the saved gates and cells for inputs of dtype `t`: f64 for f64, else f32.
inline DType recurrence_compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

/// Why the GPU kernel cannot take the problem, or empty when it can (lstm_recurrence_fused).
/// Defined with the CUDA kernel (CUDA builds); "not a CUDA build" otherwise.
std::string recurrence_unfused_reason(const TensorMeta& gx, int64_t hidden, const LayoutPtr& layout);

}  // namespace detail

}  // namespace tessera
