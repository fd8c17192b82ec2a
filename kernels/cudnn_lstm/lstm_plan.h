// What cudnn_lstm and cudnn_lstm_backward share on the GPU (CUDA builds with cuDNN; include from
// .cu files only): the cuDNN descriptors and buffer sizes of one LSTM problem, cached per shape,
// and the kernels that move tessera's weights into cuDNN's weight space and gradients back.
//
// cuDNN keeps an LSTM's parameters in one opaque "weight space": per gate, in cuDNN's gate order
// (i, f, g, o), an input matrix W [H, In] and a recurrent matrix R [H, H] (row-major: row j is
// hidden unit j), an input bias and a recurrent bias [H]; cudnnGetRNNWeightParams says where.
// tessera keeps wx [In, 4H] and wh [H, 4H] with the gates (i, f, o, u) along the columns, so
//   W_g[j][k] = wx[k][G(g)·H + j],   R_g[j][k] = wh[k][G(g)·H + j],   G = (0, 1, 3, 2)
// (cuDNN's g is tessera's u). Biases: the input bias of gate g is bias[G(g)·H + j]; the recurrent
// bias carries forget_bias on the forget gate and zeros elsewhere, so pre_f gets bias + forget_bias
// without rounding their sum to bf16/f16.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <mutex>

#include "core/tensor.h"
#include "kernels/cudnn_lstm/cudnn_lstm.h"

namespace tessera {
namespace cuda {

/// Element offsets of each gate's pieces in the weight space, cuDNN's gate order (i, f, g, o).
struct LstmWeightOffsets {
  std::array<int64_t, 4> w_in{}, w_rec{}, b_in{}, b_rec{};
  bool covers_space = false;  ///< the 16 pieces fill the weight space exactly (else zero it first)
};

/// cuDNN descriptors and sizes for one (device, dtype, T, B, In, H, TF32 mode). Made on first
/// use and kept for the life of the process (like the handle); read-only afterwards.
struct LstmPlan {
  DType dtype = DType::f32;
  detail::LstmDims dims{};
  cudnnRNNDescriptor_t rnn = nullptr;
  cudnnDropoutDescriptor_t dropout = nullptr;  // no dropout (one layer)
  cudnnRNNDataDescriptor_t x = nullptr;        // [T, B, In] time-major, every sequence T long
  cudnnRNNDataDescriptor_t y = nullptr;        // [T, B, H]
  cudnnTensorDescriptor_t state = nullptr;     // h and c: [layers = 1, B, H]
  size_t weight_bytes = 0, work_bytes = 0, reserve_bytes = 0;

  /// Where the pieces are, found with cudnnGetRNNWeightParams on the first call (a real weight
  /// space `space` of weight_bytes on the plan's device); checks the shapes cuDNN reports.
  const LstmWeightOffsets& offsets(cudnnHandle_t handle, void* space) const;

 private:
  mutable std::once_flag offsets_once_;
  mutable LstmWeightOffsets offsets_;
};

/// The plan of this problem on `device` (f32 plans also depend on cuda::allow_tf32()).
const LstmPlan& lstm_plan(int device, DType dtype, const detail::LstmDims& dims);

/// The devSeqLengths argument of cuDNN's RNN calls: a temporary i32 [B] on `device` holding T in
/// every entry (every sequence is whole), written on the device's stream.
Tensor seq_lengths(const LstmPlan& plan, Device device);

/// Fills `space` (u8 [weight_bytes] on the plan's device) from wx, wh, bias (see the file
/// comment), on the tensors' stream.
void pack_lstm_weights(const LstmPlan& plan, const Tensor& wx, const Tensor& wh, const Tensor& bias,
                       double forget_bias, const Tensor& space);

/// The reverse for gradients: dwx, dwh, dbias from the gradient weight space `dspace` (dbias
/// from the input-bias gradients; the recurrent ones are equal and dropped).
void unpack_lstm_grads(const LstmPlan& plan, const Tensor& dspace, const Tensor& dwx, const Tensor& dwh,
                       const Tensor& dbias);

}  // namespace cuda
}  // namespace tessera
