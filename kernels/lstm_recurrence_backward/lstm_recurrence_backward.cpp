#include "kernels/lstm_recurrence_backward/lstm_recurrence_backward.h"

#include <algorithm>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/common/lstm_cell_cpu.h"
#include "kernels/lstm_recurrence/lstm_recurrence.h"
#include "kernels/lstm_recurrence/recurrent_product.h"

namespace tessera {

std::vector<Tensor> lstm_recurrence_backward(const Tensor& dy, const Tensor& dhT, const Tensor& dcT,
                                             const Tensor& gates, const Tensor& cells, const Tensor& c0,
                                             const Tensor& wh, const LayoutPtr& layout) {
  return call<op::LstmRecurrenceBackward>({layout}, {dy, dhT, dcT, gates, cells, c0, wh});
}

std::vector<TensorMeta> op::LstmRecurrenceBackward::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 7);
  const TensorMeta &dy = in[0], &dhT = in[1], &dcT = in[2], &gates = in[3], &cells = in[4], &c0 = in[5];
  // gx's place in the forward's checks is taken by dpre's shape in c0's dtype
  const TensorMeta dpre{gates.shape, c0.dtype, c0.device};
  const detail::RecurrenceDims d = detail::check_recurrence_inputs(kName, dpre, c0, c0, in[6], attrs.layout);
  const Shape seq({d.steps, d.batch, d.hidden});
  TS_CHECK(dy.shape == seq && dhT.shape == c0.shape && dcT.shape == c0.shape && cells.shape == seq, ShapeError,
           kName << ": dy " << dy << ", dhT " << dhT << ", dcT " << dcT << ", cells " << cells << " must be " << seq
                 << ", " << c0.shape << ", " << c0.shape << ", " << seq << " for gates " << gates);
  const TensorMeta* same[] = {&dy, &dhT, &dcT};
  for (const TensorMeta* m : same)
    TS_CHECK(m->dtype == c0.dtype && m->device == c0.device, DTypeError,
             kName << ": gradient " << *m << " must have c0's dtype and device (" << c0 << ")");
  const DType ct = detail::recurrence_compute_dtype(c0.dtype);
  TS_CHECK(gates.dtype == ct && cells.dtype == ct && gates.device == c0.device && cells.device == c0.device,
           DTypeError,
           kName << ": gates " << gates << " and cells " << cells << " must be " << ct << " on c0's device (" << c0
                 << ")");
  return {dpre, c0, c0};
}

namespace {

template <class T>
void recurrence_backward_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const BlockLayout* layout) {
  const int64_t ts = in[0].size(0), b = in[0].size(1), hs = in[0].size(2), g4 = 4 * hs;
  const T* dy = in[0].data<T>();     // [T, B, H]
  const T* gates = in[3].data<T>();  // [T, B, 4H] activated (i, f, o, u)
  const T* cells = in[4].data<T>();  // [T, B, H]
  const T* c0 = in[5].data<T>();     // [B, H]
  const T* w = in[6].data<T>();
  T* dpre = out[0].data<T>();        // [T, B, 4H]
  std::vector<T> dh(in[1].data<T>(), in[1].data<T>() + b * hs);  // dh from later steps: dhT first
  std::vector<T> dc(in[2].data<T>(), in[2].data<T>() + b * hs);  // dc_next: dcT first
  for (int64_t t = ts - 1; t >= 0; --t) {
    T* dp = dpre + t * b * g4;
    cpu::lstm_cell_backward(gates + t * b * g4, cells + t * b * hs, t == 0 ? c0 : cells + (t - 1) * b * hs,
                            dy + t * b * hs, dh.data(), dc.data(), dp, b, hs);
    std::fill(dh.begin(), dh.end(), T(0));
    cpu::recurrent_product(dp, w, layout, b, hs, g4, /*transposed=*/true, dh.data());  // dpre_t·W_hᵀ
  }
  std::copy(dh.begin(), dh.end(), out[1].data<T>());
  std::copy(dc.begin(), dc.end(), out[2].data<T>());
}

}  // namespace

void op::LstmRecurrenceBackward::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                     const Attrs& attrs) {
  dispatch_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // the saved gates and cells are f32 for f32 (and widened bf16/f16) inputs, f64 for f64
    recurrence_backward_cpu<T>(in, out, attrs.layout.get());
  });
}

}  // namespace tessera
