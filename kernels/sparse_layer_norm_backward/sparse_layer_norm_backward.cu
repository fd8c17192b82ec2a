// sparse_layer_norm_backward on the GPU: the group-normalization backward of
// kernels/common/cuda/normalize.cuh over S segments of G = C / S features, with the ReLU mask
// y > 0 when the forward applied ReLU. Pass 1: block (row block, segment), a warp per row (the
// block for long segments), writes dx and per-block column sums of gz·xhat and gz; pass 2 adds
// those in block order into dgamma, dbeta [C] (deterministic, no atomics).
#include "kernels/common/cuda/normalize.cuh"
#include "kernels/sparse_layer_norm_backward/sparse_layer_norm_backward.h"

namespace tessera {

void op::SparseLayerNormBackward::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                   const Attrs& attrs) {
  const int64_t c = in[1].shape()[-1], nseg = attrs.segments, gs = c / nseg;
  const int64_t rows = in[1].numel() / c;
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = cuda::acc_t<T>;
    const T* y = attrs.relu ? static_cast<const T*>(in[4].data_ptr()) : nullptr;
    const T* gamma = attrs.has_gamma ? static_cast<const T*>(in[4 + attrs.relu].data_ptr()) : nullptr;
    cuda::normalize_backward<T>(static_cast<const T*>(in[0].data_ptr()), static_cast<const T*>(in[1].data_ptr()),
                                static_cast<const A*>(in[2].data_ptr()), static_cast<const A*>(in[3].data_ptr()), y,
                                gamma, static_cast<T*>(out[0].data_ptr()), static_cast<T*>(out[1].data_ptr()),
                                static_cast<T*>(out[2].data_ptr()), rows, gs, nseg, out[0].device(),
                                cuda::current_stream(out[0]), kName);
  });
}

}  // namespace tessera
