// cuDNN's dense 2-D convolution, channels last, as the reference and the baseline of the
// block-sparse convolution (tests/gpu/bsconv_test.cpp, bench/bsconv_gpu). CUDA builds with cuDNN
// only (TESSERA_HAVE_CUDNN); not an op: nothing in the library's models calls it.
//
//   cuda::DnnConv2d conv({n, h, w, c, k, 3, 3, 1, 1}, DType::bf16, /*device=*/0);
//   conv.forward(x, filter, y);          // x [N, H, W, C], filter [K, R, S, C] -> y [N, P, Q, K]
//   conv.data_gradient(filter, dy, dx);  // dx [N, H, W, C]
//   conv.filter_gradient(x, dy, dfilter);
//
// The algorithms are cuDNN's fastest by cudnnFind*AlgorithmEx (which times them) on scratch
// tensors at construction, with tensor-op math and f32 accumulation; workspaces come from the
// device's pool. Outputs are overwritten (β = 0). Runs on the device's stream.
#pragma once

#include <cstdint>
#include <memory>

#include "core/tensor.h"

namespace tessera {
namespace cuda {

class DnnConv2d {
 public:
  struct Geometry {
    int64_t n, h, w, c;      ///< input [N, H, W, C]
    int64_t k, r, s;         ///< filter [K, R, S, C]
    int64_t pad_h, pad_w;    ///< zeros on both sides
    int64_t stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  };
  /// dt: bf16, f16 or f32 (ValueError otherwise); DeviceError when cuDNN refuses the geometry.
  DnnConv2d(const Geometry& g, DType dt, int device);
  ~DnnConv2d();
  DnnConv2d(const DnnConv2d&) = delete;
  DnnConv2d& operator=(const DnnConv2d&) = delete;

  /// Output sizes [N, P, Q, K].
  Shape output_shape() const;
  void forward(const Tensor& x, const Tensor& filter, const Tensor& y);
  void data_gradient(const Tensor& filter, const Tensor& dy, const Tensor& dx);
  void filter_gradient(const Tensor& x, const Tensor& dy, const Tensor& dfilter);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cuda
}  // namespace tessera
