// layer_norm on the GPU: the group normalization of kernels/common/cuda/normalize.cuh with one
// group per row (S = 1, G = C): a warp per row of x [rows, C] (a block for long rows), the row
// held in registers. Outputs y [rows, C] (x's dtype, or bf16/f16 for f32 x: the f32 value
// rounded once on store), mean and rstd [rows] (acc_t: f32, f64 for f64).
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/common/cuda/normalize.cuh"
#include "kernels/layer_norm/layer_norm.h"

namespace tessera {

namespace {

// y of element type TY for x, gamma, beta of element type T.
template <class T, class TY>
void layer_norm_forward(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                        const op::LayerNorm::Attrs& attrs) {
  using A = cuda::acc_t<T>;
  const int64_t c = in[0].shape()[-1], rows = in[0].numel() / c;
  const T* gamma = attrs.has_gamma ? static_cast<const T*>(in[1].data_ptr()) : nullptr;
  const T* beta = attrs.has_beta ? static_cast<const T*>(in[1 + attrs.has_gamma].data_ptr()) : nullptr;
  cuda::normalize_forward<T, TY>(static_cast<const T*>(in[0].data_ptr()), gamma, beta,
                                 static_cast<TY*>(out[0].data_ptr()), static_cast<A*>(out[1].data_ptr()),
                                 static_cast<A*>(out[2].data_ptr()), rows, c, 1, attrs.eps, false,
                                 cuda::current_stream(out[0]), op::LayerNorm::kName);
}

}  // namespace

void op::LayerNorm::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  if (out[0].dtype() != in[0].dtype()) {  // f32 x, bf16/f16 y
    cuda::dispatch_f32_with_half(in[0].dtype(), out[0].dtype(), kName, [&](auto tag) {
      layer_norm_forward<float, typename decltype(tag)::type>(in, out, attrs);
    });
    return;
  }
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    layer_norm_forward<T, T>(in, out, attrs);
  });
}

}  // namespace tessera
