#include "kernels/common/eigen_maps.h"
#include "kernels/cudnn_lstm_backward/cudnn_lstm_backward.h"

#include <Eigen/Core>
#include <cmath>

#include "kernels/common/dispatch.h"
#include "kernels/common/lstm_cell_cpu.h"
#include "kernels/cudnn_lstm/cudnn_lstm.h"
#include "kernels/fill/fill.h"

namespace tessera {

std::vector<Tensor> cudnn_lstm_backward(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& wx,
                                        const Tensor& wh, const Tensor& bias, const Tensor& y,
                                        const Tensor& reserve, const Tensor& dy, const Tensor& dhT,
                                        const Tensor& dcT, double forget_bias) {
  const Tensor dh = dhT.defined() ? dhT : fill(h0.meta(), 0.0);
  const Tensor dc = dcT.defined() ? dcT : fill(c0.meta(), 0.0);
  return call<op::CudnnLstmBackward>({forget_bias}, {x, h0, c0, wx, wh, bias, y, reserve, dy, dh, dc});
}

std::vector<TensorMeta> op::CudnnLstmBackward::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 11);
  const detail::LstmDims d = detail::check_lstm_inputs(kName, in, attrs.forget_bias);
  const TensorMeta &x = in[0], &h0 = in[1], &y = in[6], &reserve = in[7], &dy = in[8], &dhT = in[9], &dcT = in[10];
  const Shape ys({d.steps, d.batch, d.hidden});
  TS_CHECK(y.shape == ys && dy.shape == ys, ShapeError,
           kName << ": y " << y << " and dy " << dy << " must be " << ys << " for x " << x << " and h0 " << h0);
  TS_CHECK(dhT.shape == h0.shape && dcT.shape == h0.shape, ShapeError,
           kName << ": dhT " << dhT << " and dcT " << dcT << " must be shaped like h0 " << h0);
  for (const TensorMeta* m : {&y, &dy, &dhT, &dcT})
    TS_CHECK(m->dtype == x.dtype, DTypeError, kName << ": " << *m << " and x " << x << " differ in dtype");
  const int64_t r = static_cast<int64_t>(detail::lstm_reserve_bytes(kName, x, d));
  TS_CHECK(reserve.dtype == DType::u8 && reserve.shape == Shape({r}), ShapeError,
           kName << ": reserve " << reserve << " must be cudnn_lstm's u8[" << r << "] for x " << x << " and h0 " << h0);
  return {x, h0, h0, in[3], in[4], in[5]};
}

namespace {

using cpu::RowMat;
using cpu::RowMap;
using cpu::ConstRowMap;

template <class T>
void lstm_backward_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  const int64_t ts = in[0].size(0), b = in[0].size(1), n = in[0].size(2), hs = in[1].size(1), g4 = 4 * hs;
  const T* h0 = in[1].data<T>();                                 // [B, H]
  const T* c0 = in[2].data<T>();                                 // [B, H]
  ConstRowMap<T> wx(in[3].data<T>(), n, g4);                            // [In, 4H]
  ConstRowMap<T> wh(in[4].data<T>(), hs, g4);                           // [H, 4H]
  const T* y = in[6].data<T>();                                  // [T, B, H]
  const T* gates = static_cast<const T*>(in[7].data_ptr());      // [T, B, 4H] activated i, f, o, u
  const T* cells = gates + ts * b * g4;                          // [T, B, H]
  const T* dy = in[8].data<T>();                                 // [T, B, H]
  T* dx = out[0].data<T>();                                      // [T, B, In]
  T* dh_next = out[1].data<T>();                                 // [B, H]: becomes dh0
  T* dc_next = out[2].data<T>();                                 // [B, H]: becomes dc0
  std::copy(in[9].data<T>(), in[9].data<T>() + b * hs, dh_next);  // dhT
  std::copy(in[10].data<T>(), in[10].data<T>() + b * hs, dc_next);  // dcT

  RowMat<T> dpre(ts * b, g4);  // gradient of every step's pre-activations [T*B, 4H]
  for (int64_t t = ts - 1; t >= 0; --t) {
    cpu::lstm_cell_backward(gates + t * b * g4, cells + t * b * hs, t == 0 ? c0 : cells + (t - 1) * b * hs,
                            dy + t * b * hs, dh_next, dc_next, dpre.data() + t * b * g4, b, hs);
    // dh_{t-1} = dpre_t · whᵀ
    RowMap<T>(dh_next, b, hs).noalias() = dpre.middleRows(t * b, b) * wh.transpose();
  }
  RowMap<T>(dx, ts * b, n).noalias() = dpre * wx.transpose();                          // dx = dpre·wxᵀ
  RowMap<T>(out[3].data<T>(), n, g4).noalias() = ConstRowMap<T>(in[0].data<T>(), ts * b, n).transpose() * dpre;
  // dwh = Σ_t h_{t-1}ᵀ·dpre_t, h_{-1} = h0 and h_{t-1} = y_{t-1}: h0's rows, then y's first T-1 steps.
  RowMap<T> dwh(out[4].data<T>(), hs, g4);
  dwh.noalias() = ConstRowMap<T>(h0, b, hs).transpose() * dpre.topRows(b);
  if (ts > 1) dwh.noalias() += ConstRowMap<T>(y, (ts - 1) * b, hs).transpose() * dpre.bottomRows((ts - 1) * b);
  Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>(out[5].data<T>(), g4) = dpre.colwise().sum();
}

}  // namespace

void op::CudnnLstmBackward::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    lstm_backward_cpu<T>(in, out);
  });
}

}  // namespace tessera
