// layer_norm on the GPU: the group normalization of kernels/common/cuda/normalize.cuh with one
// group per row (S = 1, G = C): a warp per row of x [rows, C] (a block for long rows), the row
// held in registers. Outputs y [rows, C] (x's dtype), mean and rstd [rows] (acc_t: f32, f64 for
// f64).
#include "kernels/common/cuda/normalize.cuh"
#include "kernels/layer_norm/layer_norm.h"

namespace tessera {

void LayerNorm::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const int64_t c = in[0].shape()[-1], rows = in[0].numel() / c;
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = cuda::acc_t<T>;
    const T* gamma = attrs.has_gamma ? static_cast<const T*>(in[1].data_ptr()) : nullptr;
    const T* beta = attrs.has_beta ? static_cast<const T*>(in[1 + attrs.has_gamma].data_ptr()) : nullptr;
    cuda::normalize_forward<T>(static_cast<const T*>(in[0].data_ptr()), gamma, beta, static_cast<T*>(out[0].data_ptr()),
                               static_cast<A*>(out[1].data_ptr()), static_cast<A*>(out[2].data_ptr()), rows, c, 1,
                               attrs.eps, false, cuda::current_stream(out[0]), kName);
  });
}

}  // namespace tessera
