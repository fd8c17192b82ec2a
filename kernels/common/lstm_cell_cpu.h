// The elementwise part of one LSTM step on the CPU for B rows, shared by the CPU references of
// the sequence ops (cudnn_lstm, lstm_recurrence and their backward ops). Gates in the order
// (i, f, o, u) along 4H; σ(v) = 1/(1 + e^-v) (e^-v overflows to inf for very negative v: 0,
// never NaN).
#pragma once

#include <cmath>
#include <cstdint>

namespace tessera {
namespace cpu {

/// g [B, 4H]: the pre-activations, replaced by the activated gates i, f, o, u; c_prev [B, H];
/// writes c = f⊙c_prev + i⊙u and h = o⊙tanh(c) [B, H].
template <class T>
void lstm_cell_forward(T* g, const T* c_prev, T* c, T* h, int64_t b, int64_t hs, T forget_bias) {
  auto sigmoid = [](T v) { return T(1) / (T(1) + std::exp(-v)); };
  for (int64_t r = 0; r < b; ++r) {
    T* gr = g + r * 4 * hs;
    for (int64_t j = 0; j < hs; ++j) {
      const T i = sigmoid(gr[j]), f = sigmoid(gr[hs + j] + forget_bias), o = sigmoid(gr[2 * hs + j]);
      const T u = std::tanh(gr[3 * hs + j]);
      const int64_t k = r * hs + j;
      gr[j] = i, gr[hs + j] = f, gr[2 * hs + j] = o, gr[3 * hs + j] = u;
      c[k] = f * c_prev[k] + i * u;
      h[k] = o * std::tanh(c[k]);
    }
  }
}

/// The step's gradients from the activated gates g [B, 4H], c and c_prev [B, H], and the
/// gradient reaching h: dy + dh_rec [B, H]. dc [B, H] holds the gradient reaching c from later
/// steps and becomes that of c_prev; writes dpre [B, 4H]:
///   dc_t = dc + dh·o·(1 − tanh²c),  dpre = (dc_t·u·i(1−i), dc_t·c_prev·f(1−f), dh·tanh(c)·o(1−o), dc_t·i·(1−u²))
template <class T>
void lstm_cell_backward(const T* g, const T* c, const T* c_prev, const T* dy, const T* dh_rec, T* dc, T* dpre,
                        int64_t b, int64_t hs) {
  for (int64_t r = 0; r < b; ++r) {
    const T* gr = g + r * 4 * hs;
    T* dp = dpre + r * 4 * hs;
    for (int64_t j = 0; j < hs; ++j) {
      const int64_t k = r * hs + j;
      const T i = gr[j], f = gr[hs + j], o = gr[2 * hs + j], u = gr[3 * hs + j];
      const T tc = std::tanh(c[k]);
      const T dh = dy[k] + dh_rec[k];
      const T dct = dc[k] + dh * o * (T(1) - tc * tc);
      dp[j] = dct * u * i * (T(1) - i);
      dp[hs + j] = dct * c_prev[k] * f * (T(1) - f);
      dp[2 * hs + j] = dh * tc * o * (T(1) - o);
      dp[3 * hs + j] = dct * i * (T(1) - u * u);
      dc[k] = dct * f;
    }
  }
}

}  // namespace cpu
}  // namespace tessera
