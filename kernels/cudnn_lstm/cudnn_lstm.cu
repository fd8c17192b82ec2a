// cudnn_lstm on the GPU: cudnnRNNForward (training mode) over the whole sequence, with tessera's
// weights packed into cuDNN's weight space on every call (lstm_plan.h: a tiled transpose per
// weight, ~256 MB of traffic for H = In = 2048 in f32, under 0.1 ms) and the workspace a temporary
// tensor from the device's pool. x [T, B, In] is cuDNN's time-major unpacked layout as it is;
// y [T, B, H] likewise.
#include "kernels/cudnn_lstm/cudnn_lstm.h"

#include <algorithm>

#include "core/cuda/check.cuh"

#ifdef TESSERA_HAVE_CUDNN
#include "kernels/common/cuda/dnn.h"
#include "kernels/cudnn_lstm/lstm_plan.h"
#endif

namespace tessera {

#ifdef TESSERA_HAVE_CUDNN

namespace detail {
size_t cudnn_lstm_reserve_bytes(int device, DType dtype, const LstmDims& d) {
  return cuda::lstm_plan(device, dtype, d).reserve_bytes;
}
}  // namespace detail

void op::CudnnLstm::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x = in[0], &h0 = in[1], &c0 = in[2];
  const detail::LstmDims d{x.size(0), x.size(1), x.size(2), h0.size(1)};
  const int dev = x.device().index;
  cudnnHandle_t handle = cuda::dnn_handle(dev);
  const cuda::LstmPlan& p = cuda::lstm_plan(dev, x.dtype(), d);
  const TensorOptions bytes = TensorOptions(DType::u8).device(x.device());
  Tensor space = empty({static_cast<int64_t>(p.weight_bytes)}, bytes);
  cuda::pack_lstm_weights(p, in[3], in[4], in[5], attrs.forget_bias, space);
  Tensor work = empty({static_cast<int64_t>(std::max<size_t>(p.work_bytes, 1))}, bytes);
  const Tensor lengths = cuda::seq_lengths(p, x.device());
  TS_CUDNN_CHECK(cudnnRNNForward(handle, p.rnn, CUDNN_FWD_MODE_TRAINING,
                                 static_cast<const int32_t*>(lengths.data_ptr()), p.x, x.data_ptr(), p.y,
                                 out[0].data_ptr(), p.state, h0.data_ptr(), out[1].data_ptr(), p.state,
                                 c0.data_ptr(), out[2].data_ptr(), p.weight_bytes, space.data_ptr(), p.work_bytes,
                                 work.data_ptr(), p.reserve_bytes, out[3].data_ptr()));
}

#else

void op::CudnnLstm::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>&, const Attrs&) {
  TS_THROW(NotImplementedError,
           kName << ": x " << in[0].meta() << " is on the GPU but tessera was built without cuDNN");
}

#endif

}  // namespace tessera
