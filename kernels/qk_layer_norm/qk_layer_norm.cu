// qk_layer_norm on the GPU: the group normalization of kernels/common/cuda/normalize.cuh run on
// q's and on k's column range of each row in place of a contiguous row (row stride W), writing
// straight into out's matching columns, and v's columns copied with the dtype change: y read
// once, out written once, no pieces in between.
#include "kernels/common/cuda/copy_columns.cuh"
#include "kernels/common/cuda/elementwise.cuh"
#include "kernels/common/cuda/normalize.cuh"
#include "kernels/qk_layer_norm/qk_layer_norm.h"

namespace tessera {

namespace {

// out of element type TY for y and the parameters of element type T.
template <class T, class TY>
void qk_layer_norm_forward(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                           const op::QkLayerNorm::Attrs& attrs) {
  using A = cuda::acc_t<T>;
  const int64_t w = in[0].shape()[-1], rows = in[0].numel() / w, cq = attrs.q_cols, ck = (w - cq) / 2;
  const T* y = static_cast<const T*>(in[0].data_ptr());
  auto param = [&](int i) { return static_cast<const T*>(in[i].data_ptr()); };
  auto stats = [&](int i) { return static_cast<A*>(out[i].data_ptr()); };
  TY* o = static_cast<TY*>(out[0].data_ptr());
  const cudaStream_t stream = cuda::current_stream(out[0]);
  const char* name = op::QkLayerNorm::kName;
  cuda::normalize_forward<T, TY>(y, param(1), param(2), o, stats(1), stats(2), rows, cq, 1, attrs.eps, false, stream,
                                 name, w);
  cuda::normalize_forward<T, TY>(y + cq, param(3), param(4), o + cq, stats(3), stats(4), rows, ck, 1, attrs.eps,
                                 false, stream, name, w);
  cuda::copy_columns<T, TY>(y + cq + ck, o + cq + ck, rows, ck, w, stream, name);
}

}  // namespace

void op::QkLayerNorm::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  if (out[0].dtype() != in[0].dtype()) {  // f32 y, bf16/f16 out
    cuda::dispatch_f32_with_half(in[0].dtype(), out[0].dtype(), kName, [&](auto tag) {
      qk_layer_norm_forward<float, typename decltype(tag)::type>(in, out, attrs);
    });
    return;
  }
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    qk_layer_norm_forward<T, T>(in, out, attrs);
  });
}

}  // namespace tessera
