#include "kernels/common/eigen_maps.h"
#include "kernels/cudnn_lstm/cudnn_lstm.h"

#include <Eigen/Core>
#include <cmath>
#include <limits>

#include "core/autocast.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/lstm_cell_cpu.h"
#include "kernels/cast/cast.h"
#include "kernels/cudnn_lstm_backward/cudnn_lstm_backward.h"

namespace tessera {

std::tuple<Tensor, Tensor, Tensor> cudnn_lstm(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& wx,
                                              const Tensor& wh, const Tensor& bias, double forget_bias) {
  if (autocast::applies({&x, &h0, &c0, &wx, &wh, &bias})) {
    // autocast: the sequence in the low-precision dtype (cuDNN's half-type LSTM, f32 math), its
    // outputs back in f32 as every autocast op's are
    using autocast::operand;
    std::vector<Tensor> out = call<op::CudnnLstm>(
        {forget_bias}, {operand(x), operand(h0), operand(c0), operand(wx), operand(wh), operand(bias)});
    return {cast(out[0], DType::f32), cast(out[1], DType::f32), cast(out[2], DType::f32)};
  }
  std::vector<Tensor> out = call<op::CudnnLstm>({forget_bias}, {x, h0, c0, wx, wh, bias});
  return {out[0], out[1], out[2]};
}

namespace detail {

LstmDims check_lstm_inputs(const char* op, const std::vector<TensorMeta>& in, double forget_bias) {
  TS_CHECK(in.size() >= 6, ValueError, op << ": expected inputs x, h0, c0, wx, wh, bias, got " << in.size());
  const TensorMeta &x = in[0], &h0 = in[1], &c0 = in[2], &wx = in[3], &wh = in[4], &bias = in[5];
  const char* names[] = {"x", "h0", "c0", "wx", "wh", "bias"};
  for (int i = 0; i < 6; ++i) {
    check_floating(op, in[i], names[i]);
    TS_CHECK(in[i].dtype == x.dtype, DTypeError,
             op << ": " << names[i] << " " << in[i] << " and x " << x << " differ in dtype");
  }
  TS_CHECK(x.shape.ndim() == 3, ShapeError, op << ": x must be [T, B, In] (time-major), got " << x);
  TS_CHECK(h0.shape.ndim() == 2, ShapeError, op << ": h0 must be [B, H], got " << h0);
  const LstmDims d{x.shape[0], x.shape[1], x.shape[2], h0.shape[1]};
  const int64_t g = 4 * d.hidden;
  TS_CHECK(h0.shape[0] == d.batch && c0.shape == h0.shape, ShapeError,
           op << ": h0 " << h0 << " and c0 " << c0 << " must be [" << d.batch << ", H] for x " << x);
  TS_CHECK(wx.shape == Shape({d.in, g}) && wh.shape == Shape({d.hidden, g}) && bias.shape == Shape({g}),
           ShapeError,
           op << ": weights wx " << wx << ", wh " << wh << ", bias " << bias << " must be [" << d.in << ", " << g
              << "], [" << d.hidden << ", " << g << "], [" << g << "] (gates i, f, o, u) for x " << x << " and h0 "
              << h0);
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  TS_CHECK(d.steps >= 1 && d.batch >= 1 && d.in >= 1 && d.hidden >= 1 && d.steps <= kIntMax &&
               d.batch <= kIntMax && d.in <= kIntMax && g <= kIntMax,
           ShapeError, op << ": T, B, In, H must be >= 1 and fit cuDNN's 32-bit sizes: x " << x << ", h0 " << h0);
  TS_CHECK(std::isfinite(forget_bias), ValueError, op << ": forget_bias must be finite, got " << forget_bias);
  return d;
}

size_t lstm_reserve_bytes(const char* op, const TensorMeta& x, const LstmDims& d) {
  if (x.device.is_cuda()) {
#if defined(TESSERA_WITH_CUDA) && defined(TESSERA_HAVE_CUDNN)
    (void)op;
    return cudnn_lstm_reserve_bytes(x.device.index, x.dtype, d);
#else
    TS_THROW(NotImplementedError, op << ": x " << x << " is on the GPU but tessera was built without cuDNN");
#endif
  }
  // CPU reference: gates [T, B, 4H] then cells [T, B, H] in the compute type.
  const size_t elem = x.dtype == DType::f64 ? sizeof(double) : sizeof(float);
  return static_cast<size_t>(d.steps * d.batch * 5 * d.hidden) * elem;
}

}  // namespace detail

std::vector<TensorMeta> op::CudnnLstm::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 6);
  const detail::LstmDims d = detail::check_lstm_inputs(kName, in, attrs.forget_bias);
  const TensorMeta& x = in[0];
  const TensorMeta y{Shape({d.steps, d.batch, d.hidden}), x.dtype, x.device};
  const TensorMeta reserve{Shape({static_cast<int64_t>(detail::lstm_reserve_bytes(kName, x, d))}), DType::u8,
                           x.device};
  return {y, in[1], in[1], reserve};
}

namespace {

using cpu::RowMap;
using cpu::ConstRowMap;

template <class T>
void lstm_forward_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, double forget_bias) {
  const int64_t ts = in[0].size(0), b = in[0].size(1), n = in[0].size(2), hs = in[1].size(1), g4 = 4 * hs;
  ConstRowMap<T> x(in[0].data<T>(), ts * b, n);         // [T*B, In]
  ConstRowMap<T> wx(in[3].data<T>(), n, g4);            // [In, 4H]
  ConstRowMap<T> wh(in[4].data<T>(), hs, g4);           // [H, 4H]
  const T* bias = in[5].data<T>();               // [4H]
  T* y = out[0].data<T>();                       // [T, B, H]
  T* gates = static_cast<T*>(out[3].data_ptr());  // reserve: gates [T, B, 4H] (activated i, f, o, u)
  T* cells = gates + ts * b * g4;                 //          cells [T, B, H]
  const T fb = static_cast<T>(forget_bias);

  // Pre-activations of every step's input term at once, bias included: P [T*B, 4H].
  RowMap<T> pre(gates, ts * b, g4);
  pre.noalias() = x * wx;
  pre.rowwise() += Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(bias, g4);
  for (int64_t t = 0; t < ts; ++t) {
    const T* h_prev = t == 0 ? in[1].data<T>() : y + (t - 1) * b * hs;  // [B, H]
    const T* c_prev = t == 0 ? in[2].data<T>() : cells + (t - 1) * b * hs;
    RowMap<T> p(gates + t * b * g4, b, g4);
    p.noalias() += ConstRowMap<T>(h_prev, b, hs) * wh;  // + h·wh
    cpu::lstm_cell_forward(gates + t * b * g4, c_prev, cells + t * b * hs, y + t * b * hs, b, hs, fb);
  }
  std::copy(y + (ts - 1) * b * hs, y + ts * b * hs, out[1].data<T>());      // hT
  std::copy(cells + (ts - 1) * b * hs, cells + ts * b * hs, out[2].data<T>());  // cT
}

}  // namespace

void op::CudnnLstm::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    lstm_forward_cpu<T>(in, out, attrs.forget_bias);
  });
}

std::vector<Tensor> op::CudnnLstm::backward(const BackwardContext& ctx, const Attrs& attrs) {
  // Output gradients that never arrived (hT, cT unused) read as zeros.
  std::vector<Tensor> d = cudnn_lstm_backward(ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3), ctx.input(4),
                                              ctx.input(5), ctx.output(0), ctx.output(3), ctx.grad_output(0),
                                              ctx.grad_output(1), ctx.grad_output(2), attrs.forget_bias);
  for (int i = 0; i < 6; ++i)
    if (!ctx.needs_input_grad(i)) d[i] = Tensor();
  return d;
}

}  // namespace tessera
