// What the dense wgmma recurrence kernels share (lstm_wgmma_forward.cu, lstm_wgmma_backward.cu and
// their W-streamed twins lstm_wgmma_*_streamed.cu; sm_90a, include from .cu files only): their
// arguments, and a consumer thread's part of a group of 8 units: its two rows of the m64 tile and
// units u, u + 1. Forward (DenseCell): of every gate, with their bias and cells, the step's input
// term, and the step's epilogue after the product P [64, 32]:
//   pre_j = (P[:, 8j + e] + gx[t][:, j·H + u + e]) + (bias[j·H + u + e] (+ forget_bias, j = f))
//   i, f, o = σ(pre_i, pre_f, pre_o), u = tanh(pre_u), c = f·c + i·u, h = o·tanh(c)
// storing y[t] = h, cells[t] = c, gates[t] = (i, f, o, u) (f32), and hT, cT after the last step.
// Backward (DenseGradCell): the carried dc, the step's saved inputs, and phase ph's epilogue after
// P [64, 8] = dpre_{t+1} · W_gᵀ (t = T − 1 − ph; lstm_wgmma_backward.cu's file comment):
//   dh = (P + dy_t) (+ dh_T at ph 0), dpre_t = lstm_step_grads(...), dc carried; phase T: dh0 = P.
#pragma once

#include <cstdint>

#include "kernels/common/cuda/lstm_gate_math.cuh"
#include "kernels/common/cuda/lstm_wgmma_ring.cuh"

namespace tessera {
namespace cuda {
namespace sm90 {

struct ForwardArgs {
  int steps, batch, hidden;
  float forget_bias;
  const void* gx;     // [T, B, 4H]
  const void* bias;   // [4H] or null
  const void* c0;     // [B, H]
  void* y;            // [T, B, H]
  void* h_last;       // [B, H]
  void* c_last;       // [B, H]
  float* gates;       // [T, B, 4H]
  float* cells;       // [T, B, H]
  unsigned* counter;  // zeroed: the grid's arrivals
};

/// Thread (warp w of its warpgroup, lane 4·wq + q) of the warpgroup that owns group g: rows
/// 16w + wq (+ 8), units u = 8g + 2q and u + 1 (accumulator acc[4j + 2hh + e]: row rows[hh], gate
/// j of unit u + e).
template <class T>
struct DenseCell {
  int u;
  int rows[2];
  bool live[2];
  float bias[4][2];  // gate j of units u, u + 1; the forget gate's with forget_bias
  float c[2][2];     // the cells, carried across the steps (from c0)

  __device__ __forceinline__ DenseCell(const ForwardArgs& p, int group, int warp_of_group, int lane) {
    const int H = p.hidden;
    u = group * 8 + 2 * (lane % 4);
    consumer_rows(warp_of_group, lane, p.batch, rows, live);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 b = p.bias ? load_pair(static_cast<const T*>(p.bias) + j * H + u) : make_float2(0.f, 0.f);
      bias[j][0] = j == 1 ? p.forget_bias + b.x : b.x;
      bias[j][1] = j == 1 ? p.forget_bias + b.y : b.y;
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float2 c0 = live[hh] ? load_pair(static_cast<const T*>(p.c0) + static_cast<int64_t>(rows[hh]) * H + u)
                                 : make_float2(0.f, 0.f);
      c[hh][0] = c0.x;
      c[hh][1] = c0.y;
    }
  }

  /// gx[hh][j][e]: step t's input term of (row rows[hh], gate j, unit u + e), read while the
  /// operand arrives.
  __device__ __forceinline__ void input_term(const ForwardArgs& p, int t, float (&gx)[2][4][2]) const {
    const int64_t G4 = 4 * static_cast<int64_t>(p.hidden);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const T* row = static_cast<const T*>(p.gx) + (static_cast<int64_t>(t) * p.batch + rows[hh]) * G4 + u;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 v = live[hh] ? load_pair(row + j * p.hidden) : make_float2(0.f, 0.f);
        gx[hh][j][0] = v.x;
        gx[hh][j][1] = v.y;
      }
    }
  }

  /// Step t's epilogue (the file comment) from the product acc and the input term gx.
  __device__ __forceinline__ void finish_step(const ForwardArgs& p, int t, const float (&acc)[16],
                                              const float (&gx)[2][4][2]) {
    const int B = p.batch, H = p.hidden;
    const int64_t G4 = 4 * static_cast<int64_t>(H);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      if (!live[hh]) continue;
      float h[2], cell[2], gate[4][2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float pre[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) pre[j] = (acc[4 * j + 2 * hh + e] + gx[hh][j][e]) + bias[j][e];
        gate[0][e] = sigmoid_fast(pre[0]);
        gate[1][e] = sigmoid_fast(pre[1]);
        gate[2][e] = sigmoid_fast(pre[2]);
        gate[3][e] = tanh_fast(pre[3]);
        c[hh][e] = gate[1][e] * c[hh][e] + gate[0][e] * gate[3][e];
        cell[e] = c[hh][e];
        h[e] = gate[2][e] * tanh_fast(c[hh][e]);
      }
      const int64_t hb = static_cast<int64_t>(rows[hh]) * H + u;  // [B, H] index
      const int64_t th = static_cast<int64_t>(t) * B * H + hb;    // [T, B, H] index
      store_pair(static_cast<T*>(p.y) + th, h[0], h[1]);
      *reinterpret_cast<float2*>(p.cells + th) = make_float2(cell[0], cell[1]);
      float* gt = p.gates + (static_cast<int64_t>(t) * B + rows[hh]) * G4 + u;
#pragma unroll
      for (int j = 0; j < 4; ++j) *reinterpret_cast<float2*>(gt + j * H) = make_float2(gate[j][0], gate[j][1]);
      if (t == p.steps - 1) {
        store_pair(static_cast<T*>(p.h_last) + hb, h[0], h[1]);
        store_pair(static_cast<T*>(p.c_last) + hb, cell[0], cell[1]);
      }
    }
  }
};

struct BackwardArgs {
  int steps, batch, hidden;
  const void* dy;       // [T, B, H]
  const void* dh_last;  // [B, H]
  const void* dc_last;  // [B, H]
  const float* gates;   // [T, B, 4H]
  const float* cells;   // [T, B, H]
  const void* c0;       // [B, H]
  void* dpre;           // [T, B, 4H]
  void* dh0;            // [B, H]
  void* dc0;            // [B, H]
  unsigned* counter;    // zeroed: the grid's arrivals
};

/// The backward's consumer thread (rows and units as DenseCell's; accumulator acc[2hh + e]: row
/// rows[hh], unit u + e).
template <class T>
struct DenseGradCell {
  int u;
  int rows[2];
  bool live[2];
  float dcc[2][2];  // the carried dc of (row, unit), from dc_T

  /// Step t's saved gates and cells, c_{t−1} and dy_t (read while the operand arrives).
  struct StepInputs {
    float gate[2][4][2], cell[2][2], cprev[2][2], dy[2][2];
  };

  __device__ __forceinline__ DenseGradCell(const BackwardArgs& p, int group, int warp_of_group, int lane) {
    u = group * 8 + 2 * (lane % 4);
    consumer_rows(warp_of_group, lane, p.batch, rows, live);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float2 d =
          live[hh] ? load_pair(static_cast<const T*>(p.dc_last) + static_cast<int64_t>(rows[hh]) * p.hidden + u)
                   : make_float2(0.f, 0.f);
      dcc[hh][0] = d.x;
      dcc[hh][1] = d.y;
    }
  }

  __device__ __forceinline__ void read_step(const BackwardArgs& p, int t, bool final_phase, StepInputs& in) const {
    const int B = p.batch, H = p.hidden;
    const int64_t G4 = 4 * static_cast<int64_t>(H);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      if (!live[hh] || final_phase) continue;
      const int64_t bt = (static_cast<int64_t>(t) * B + rows[hh]) * H + u;
      const float* gt = p.gates + (static_cast<int64_t>(t) * B + rows[hh]) * G4 + u;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 v = *reinterpret_cast<const float2*>(gt + j * H);
        in.gate[hh][j][0] = v.x;
        in.gate[hh][j][1] = v.y;
      }
      const float2 c = *reinterpret_cast<const float2*>(p.cells + bt);
      const float2 cp = t > 0 ? *reinterpret_cast<const float2*>(p.cells + bt - static_cast<int64_t>(B) * H)
                              : load_pair(static_cast<const T*>(p.c0) + static_cast<int64_t>(rows[hh]) * H + u);
      const float2 d = load_pair(static_cast<const T*>(p.dy) + bt);
      in.cell[hh][0] = c.x, in.cell[hh][1] = c.y;
      in.cprev[hh][0] = cp.x, in.cprev[hh][1] = cp.y;
      in.dy[hh][0] = d.x, in.dy[hh][1] = d.y;
    }
  }

  /// Phase ph's epilogue (t = T − 1 − ph; the final phase stores dh0 = acc).
  __device__ __forceinline__ void finish_phase(const BackwardArgs& p, int ph, const float (&acc)[4],
                                               const StepInputs& in) {
    const int B = p.batch, H = p.hidden, t = p.steps - 1 - ph;
    const bool final_phase = ph == p.steps;
    const int64_t G4 = 4 * static_cast<int64_t>(H);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      if (!live[hh]) continue;
      const int64_t hb = static_cast<int64_t>(rows[hh]) * H + u;  // [B, H] index
      if (final_phase) {
        store_pair(static_cast<T*>(p.dh0) + hb, acc[2 * hh], acc[2 * hh + 1]);
        continue;
      }
      float dp[4][2], dc0v[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float dh = acc[2 * hh + e] + in.dy[hh][e];
        if (ph == 0) dh += to_acc(static_cast<const T*>(p.dh_last)[hb + e]);
        const float g[4] = {in.gate[hh][0][e], in.gate[hh][1][e], in.gate[hh][2][e], in.gate[hh][3][e]};
        float d[4];
        lstm_step_grads(g, in.cell[hh][e], in.cprev[hh][e], dh, dcc[hh][e], d);
#pragma unroll
        for (int j = 0; j < 4; ++j) dp[j][e] = d[j];
        dc0v[e] = dcc[hh][e];
      }
      T* dpt = static_cast<T*>(p.dpre) + (static_cast<int64_t>(t) * B + rows[hh]) * G4 + u;
#pragma unroll
      for (int j = 0; j < 4; ++j) store_pair(dpt + j * H, dp[j][0], dp[j][1]);
      if (t == 0) store_pair(static_cast<T*>(p.dc0) + hb, dc0v[0], dc0v[1]);
    }
  }
};

}  // namespace sm90
}  // namespace cuda
}  // namespace tessera
