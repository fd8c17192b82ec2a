#pragma once

#include <vector>

#include "core/op.h"

namespace tessera {

/// Gradients of cudnn_lstm from its inputs x, h0, c0, wx, wh, bias, its outputs y and reserve,
/// and the output gradients dy [T, B, H], dhT, dcT [B, H] (undefined dhT / dcT: zeros).
/// Returns {dx, dh0, dc0, dwx, dwh, dbias}, shaped like x, h0, c0, wx, wh, bias.
std::vector<Tensor> cudnn_lstm_backward(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& wx,
                                        const Tensor& wh, const Tensor& bias, const Tensor& y,
                                        const Tensor& reserve, const Tensor& dy, const Tensor& dhT,
                                        const Tensor& dcT, double forget_bias = 0.0);

namespace op {
/// Inputs x, h0, c0, wx, wh, bias (as cudnn_lstm), y [T, B, H], reserve (cudnn_lstm's, same
/// device and forget_bias), dy [T, B, H], dhT, dcT [B, H]. Backpropagation through time, step
/// t = T−1 … 0, with dh = dy_t + (dh from step t+1) and g = (i, f, o, u) the activated gates:
///   dc  = dc_next + dh·o·(1 − tanh²(c_t))
///   dpre = (dc·u·i(1−i),  dc·c_{t−1}·f(1−f),  dh·tanh(c_t)·o(1−o),  dc·i·(1−u²))
///   dc_next = dc·f,   dh_next = dpre·whᵀ
/// then dh0 = dh_next, dc0 = dc_next, dx = dpre·wxᵀ, dwx = Σ_t x_tᵀ·dpre_t,
/// dwh = Σ_t h_{t−1}ᵀ·dpre_t (h_{−1} = h0), dbias = Σ dpre. CUDA: cudnnRNNBackwardData_v8 and
/// cudnnRNNBackwardWeights_v8 (on a copy of the reserve, which cuDNN's backward overwrites: the
/// op leaves its inputs intact). Not differentiable.
struct CudnnLstmBackward : OpBase {
  static constexpr const char* kName = "cudnn_lstm_backward";
  static constexpr bool kDifferentiable = false;
  struct Attrs {
    double forget_bias = 0.0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
