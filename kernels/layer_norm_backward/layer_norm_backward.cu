// layer_norm_backward on the GPU: the group-normalization backward of
// kernels/common/cuda/normalize.cuh with one group per row (S = 1, G = C). Pass 1: blocks of
// consecutive rows (a warp per row, or the block for long rows) write dx and per-block column
// sums of g·xhat and g; pass 2 adds those in block order into dgamma, dbeta [C] (deterministic,
// no atomics). g is in x's dtype, or bf16/f16 for f32 x (widened exactly on load).
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/common/cuda/normalize.cuh"
#include "kernels/layer_norm_backward/layer_norm_backward.h"

namespace tessera {

namespace {

// g of element type TG for x, gamma and the outputs of element type T.
template <class T, class TG>
void layer_norm_backward_run(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                             const op::LayerNormBackward::Attrs& attrs) {
  using A = cuda::acc_t<T>;
  const int64_t c = in[1].shape()[-1], rows = in[1].numel() / c;
  const T* gamma = attrs.has_gamma ? static_cast<const T*>(in[4].data_ptr()) : nullptr;
  cuda::normalize_backward<T, TG>(static_cast<const TG*>(in[0].data_ptr()), static_cast<const T*>(in[1].data_ptr()),
                                  static_cast<const A*>(in[2].data_ptr()), static_cast<const A*>(in[3].data_ptr()),
                                  nullptr, gamma, static_cast<T*>(out[0].data_ptr()),
                                  static_cast<T*>(out[1].data_ptr()), static_cast<T*>(out[2].data_ptr()), rows, c, 1,
                                  out[0].device(), cuda::current_stream(out[0]), op::LayerNormBackward::kName);
}

}  // namespace

void op::LayerNormBackward::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  if (in[0].dtype() != in[1].dtype()) {  // bf16/f16 g, f32 x
    cuda::dispatch_f32_with_half(in[1].dtype(), in[0].dtype(), kName, [&](auto tag) {
      layer_norm_backward_run<float, typename decltype(tag)::type>(in, out, attrs);
    });
    return;
  }
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    layer_norm_backward_run<T, T>(in, out, attrs);
  });
}

}  // namespace tessera
