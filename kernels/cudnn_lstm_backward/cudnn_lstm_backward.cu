// cudnn_lstm_backward on the GPU: cudnnRNNBackwardData_v8 (dx, dh0, dc0), then
// cudnnRNNBackwardWeights_v8 (which needs the reserve as BackwardData left it) into a zeroed
// gradient weight space (it accumulates), unpacked to dwx, dwh, dbias (lstm_plan.h).
// BackwardData writes into the reserve space, so both run on a copy: the op's inputs stay intact
// (a second backward through the same forward, e.g. retain_graph, sees the forward's reserve).
#include "kernels/cudnn_lstm_backward/cudnn_lstm_backward.h"

#include <algorithm>

#include "core/cuda/check.cuh"
#include "kernels/cudnn_lstm/cudnn_lstm.h"

#ifdef TESSERA_HAVE_CUDNN
#include "kernels/common/cuda/dnn.h"
#include "kernels/cudnn_lstm/lstm_plan.h"
#endif

namespace tessera {

#ifdef TESSERA_HAVE_CUDNN

void op::CudnnLstmBackward::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x = in[0], &h0 = in[1], &c0 = in[2], &y = in[6], &dy = in[8], &dhT = in[9], &dcT = in[10];
  const detail::LstmDims d{x.size(0), x.size(1), x.size(2), h0.size(1)};
  const int dev = x.device().index;
  cudnnHandle_t handle = cuda::dnn_handle(dev);
  const cuda::LstmPlan& p = cuda::lstm_plan(dev, x.dtype(), d);
  cudaStream_t s = cuda::current_stream(x);
  const TensorOptions bytes = TensorOptions(DType::u8).device(x.device());
  Tensor space = empty({static_cast<int64_t>(p.weight_bytes)}, bytes);
  cuda::pack_lstm_weights(p, in[3], in[4], in[5], attrs.forget_bias, space);
  Tensor reserve = empty({static_cast<int64_t>(p.reserve_bytes)}, bytes);
  TS_CUDA_CHECK(cudaMemcpyAsync(reserve.data_ptr(), in[7].data_ptr(), p.reserve_bytes, cudaMemcpyDeviceToDevice, s));
  Tensor work = empty({static_cast<int64_t>(std::max<size_t>(p.work_bytes, 1))}, bytes);
  const Tensor lengths = cuda::seq_lengths(p, x.device());
  const auto* lens = static_cast<const int32_t*>(lengths.data_ptr());
  TS_CUDNN_CHECK(cudnnRNNBackwardData_v8(handle, p.rnn, lens, p.y, y.data_ptr(), dy.data_ptr(), p.x,
                                         out[0].data_ptr(), p.state, h0.data_ptr(), dhT.data_ptr(),
                                         out[1].data_ptr(), p.state, c0.data_ptr(), dcT.data_ptr(),
                                         out[2].data_ptr(), p.weight_bytes, space.data_ptr(), p.work_bytes,
                                         work.data_ptr(), p.reserve_bytes, reserve.data_ptr()));
  Tensor dspace = empty({static_cast<int64_t>(p.weight_bytes)}, bytes);
  TS_CUDA_CHECK(cudaMemsetAsync(dspace.data_ptr(), 0, p.weight_bytes, s));
  TS_CUDNN_CHECK(cudnnRNNBackwardWeights_v8(handle, p.rnn, CUDNN_WGRAD_MODE_ADD, lens, p.x, x.data_ptr(),
                                            p.state, h0.data_ptr(), p.y, y.data_ptr(), p.weight_bytes,
                                            dspace.data_ptr(), p.work_bytes, work.data_ptr(), p.reserve_bytes,
                                            reserve.data_ptr()));
  cuda::unpack_lstm_grads(p, dspace, out[3], out[4], out[5]);
}

#else

void op::CudnnLstmBackward::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>&, const Attrs&) {
  TS_THROW(NotImplementedError,
           kName << ": x " << in[0].meta() << " is on the GPU but tessera was built without cuDNN");
}

#endif

}  // namespace tessera
