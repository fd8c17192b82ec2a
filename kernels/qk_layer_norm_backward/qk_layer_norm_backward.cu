// qk_layer_norm_backward on the GPU: the group-normalization backward of
// kernels/common/cuda/normalize.cuh on q's and on k's column range of each row (row stride W),
// writing dy's matching columns and dgq, dbq, dgk, dbk (deterministic: block sums added in
// order), and g's v columns copied into dy's, widened.
#include "kernels/common/cuda/copy_columns.cuh"
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/common/cuda/normalize.cuh"
#include "kernels/qk_layer_norm_backward/qk_layer_norm_backward.h"

namespace tessera {

namespace {

// g of element type TG for y, the parameters and the outputs of element type T.
template <class T, class TG>
void qk_layer_norm_backward_run(const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  using A = cuda::acc_t<T>;
  const int64_t w = in[1].shape()[-1], rows = in[1].numel() / w, cq = in[6].shape()[0], ck = (w - cq) / 2;
  const TG* g = static_cast<const TG*>(in[0].data_ptr());
  const T* y = static_cast<const T*>(in[1].data_ptr());
  auto stats = [&](int i) { return static_cast<const A*>(in[i].data_ptr()); };
  auto grad = [&](int i) { return static_cast<T*>(out[i].data_ptr()); };
  const Device device = out[0].device();
  const cudaStream_t stream = cuda::current_stream(out[0]);
  const char* name = op::QkLayerNormBackward::kName;
  cuda::normalize_backward<T, TG>(g, y, stats(2), stats(3), nullptr, static_cast<const T*>(in[6].data_ptr()), grad(0),
                                  grad(1), grad(2), rows, cq, 1, device, stream, name, w);
  cuda::normalize_backward<T, TG>(g + cq, y + cq, stats(4), stats(5), nullptr, static_cast<const T*>(in[7].data_ptr()),
                                  grad(0) + cq, grad(3), grad(4), rows, ck, 1, device, stream, name, w);
  cuda::copy_columns<TG, T>(g + cq + ck, grad(0) + cq + ck, rows, ck, w, stream, name);
}

}  // namespace

void op::QkLayerNormBackward::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
  if (in[0].dtype() != in[1].dtype()) {  // bf16/f16 g, f32 y
    cuda::dispatch_f32_with_half(in[1].dtype(), in[0].dtype(), kName, [&](auto tag) {
      qk_layer_norm_backward_run<float, typename decltype(tag)::type>(in, out);
    });
    return;
  }
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    qk_layer_norm_backward_run<T, T>(in, out);
  });
}

}  // namespace tessera
