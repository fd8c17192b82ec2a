#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "core/op.h"

namespace tessera {

/// A whole dense single-layer LSTM over a time-major sequence in one op: on the GPU through
/// cuDNN's RNN API (the dense baseline sparse LSTMs are compared with), on the CPU a plain
/// reference of the same math. x [T, B, In], state h0, c0 [B, H], weights wx [In, 4H],
/// wh [H, 4H] and bias [4H] with the gates in tessera's order (i, f, o, u) along 4H, exactly
/// as nn::LSTM / lstm_gates:
///   pre = x_t·wx + h·wh + bias,   i, f, o = σ(pre_i, pre_f + forget_bias, pre_o), u = tanh(pre_u)
///   c' = f ⊙ c + i ⊙ u,   h' = o ⊙ tanh(c')
/// Returns {y [T, B, H] (every step's h), hT, cT [B, H]}.
///
///   auto [y, h, c] = cudnn_lstm(x, h0, c0, wx, wh, bias, 1.0);
///
/// Under autocast (core/autocast.h) f32 inputs are cast to the autocast dtype, the op runs in it
/// (f32 math) and y, hT, cT come back cast to f32: the cell state is rounded to bf16/f16 once
/// per call (the sequence's end), not per step.
std::tuple<Tensor, Tensor, Tensor> cudnn_lstm(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& wx,
                                              const Tensor& wh, const Tensor& bias, double forget_bias = 0.0);

namespace op {
/// Inputs x [T, B, In], h0, c0 [B, H], wx [In, 4H], wh [H, 4H], bias [4H] (one floating dtype,
/// all sizes >= 1); attr forget_bias (finite). Outputs y [T, B, H], hT, cT [B, H] and a u8
/// reserve [R] saved for backward: on CUDA cuDNN's training reserve space (R from
/// cudnnGetRNNTempSpaceSizes, a cached query per shape), on the CPU the activated gates
/// [T, B, 4H] followed by the cells c_t [T, B, H] in the compute type (f64 for f64, else f32).
/// CUDA: f32 (TF32 tensor ops only with cuda::allow_tf32()), f64, and bf16/f16 with f32 math.
/// Builds without cuDNN raise NotImplementedError for CUDA tensors.
/// Backward through cudnn_lstm_backward (kernels/cudnn_lstm_backward); the reserve gets none.
struct CudnnLstm : OpBase {
  static constexpr const char* kName = "cudnn_lstm";
  static constexpr unsigned kSaveInputs = 0b111111;  // x, h0, c0, wx, wh, bias
  static constexpr unsigned kSaveOutputs = 0b1001;   // y, reserve
  struct Attrs {
    double forget_bias = 0.0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

namespace detail {

/// Sizes of a cudnn_lstm problem.
struct LstmDims {
  int64_t steps, batch, in, hidden;
};

/// The checks both LSTM ops share (names `op`): in[0..5] are x, h0, c0, wx, wh, bias as
/// CudnnLstm takes them. Returns the sizes.
LstmDims check_lstm_inputs(const char* op, const std::vector<TensorMeta>& in, double forget_bias);

/// Bytes of the reserve output for x's dtype and device (see CudnnLstm).
size_t lstm_reserve_bytes(const char* op, const TensorMeta& x, const LstmDims& d);

/// cuDNN's training reserve size for this problem on `device` (cached per shape; defined with
/// the CUDA kernels, in CUDA builds with cuDNN).
size_t cudnn_lstm_reserve_bytes(int device, DType dtype, const LstmDims& d);

}  // namespace detail

}  // namespace tessera
