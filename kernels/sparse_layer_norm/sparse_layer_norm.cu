// sparse_layer_norm on the GPU: the group normalization of kernels/common/cuda/normalize.cuh
// over S = segments groups of G = C / S features per row, with the fused ReLU: a warp per
// (row, segment) unit (a block for long segments). Outputs y [..., C], mean and rstd [..., S]
// (acc_t: f32, f64 for f64).
#include "kernels/common/cuda/normalize.cuh"
#include "kernels/sparse_layer_norm/sparse_layer_norm.h"

namespace tessera {

void op::SparseLayerNorm::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const int64_t c = in[0].shape()[-1], nseg = attrs.segments, gs = c / nseg;
  const int64_t units = in[0].numel() / gs;
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = cuda::acc_t<T>;
    const T* gamma = attrs.has_gamma ? static_cast<const T*>(in[1].data_ptr()) : nullptr;
    const T* beta = attrs.has_beta ? static_cast<const T*>(in[1 + attrs.has_gamma].data_ptr()) : nullptr;
    cuda::normalize_forward<T>(static_cast<const T*>(in[0].data_ptr()), gamma, beta, static_cast<T*>(out[0].data_ptr()),
                               static_cast<A*>(out[1].data_ptr()), static_cast<A*>(out[2].data_ptr()), units, gs, nseg,
                               attrs.eps, attrs.relu, cuda::current_stream(out[0]), kName);
  });
}

}  // namespace tessera
