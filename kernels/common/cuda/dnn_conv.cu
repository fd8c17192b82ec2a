// cuDNN's dense 2-D convolution (see dnn_conv.h). Compiled only with cuDNN (TESSERA_HAVE_CUDNN).
#ifdef TESSERA_HAVE_CUDNN

#include "kernels/common/cuda/dnn_conv.h"

#include <algorithm>

#include "core/cuda/runtime.h"
#include "kernels/common/cuda/dnn.h"

namespace tessera {
namespace cuda {

struct DnnConv2d::Impl {
  Geometry g;
  DType dt;
  int device;
  cudnnHandle_t h = nullptr;
  cudnnTensorDescriptor_t xd = nullptr, yd = nullptr;
  cudnnFilterDescriptor_t wd = nullptr;
  cudnnConvolutionDescriptor_t cd = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t data{};
  cudnnConvolutionBwdFilterAlgo_t filter{};
  size_t fwd_bytes = 0, data_bytes = 0, filter_bytes = 0;
  int p = 0, q = 0;  // output sizes

  Tensor workspace(size_t bytes) const {
    const int64_t n = static_cast<int64_t>(std::max<size_t>(bytes, 16));
    return empty({n}, TensorOptions(DType::u8).device(Device::cuda(device)));
  }
};

namespace {

constexpr size_t kFindWorkspace = size_t{1} << 30;

cudnnDataType_t dnn_type(DType dt) {
  switch (dt) {
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::f32: return CUDNN_DATA_FLOAT;
    default: TS_THROW(ValueError, "DnnConv2d: dtype " << dtype_name(dt) << " (want bf16, f16 or f32)");
  }
}

// The first algorithm that ran and fits the find workspace (cudnnFind*Ex sorts them by time).
template <class Perf>
Perf fastest(const Perf* perf, int n, const char* what) {
  for (int i = 0; i < n; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kFindWorkspace) return perf[i];
  TS_THROW(DeviceError, "DnnConv2d: cuDNN has no " << what << " algorithm for this geometry");
}

void check_tensor(const Tensor& t, const Shape& want, DType dt, int device, const char* what) {
  TS_CHECK(t.shape() == want && t.dtype() == dt && t.device() == Device::cuda(device),
           ShapeError,
           "DnnConv2d: " << what << " is " << t.shape() << " " << dtype_name(t.dtype()) << " on " << t.device()
                         << ", want " << want << " " << dtype_name(dt) << " on cuda:" << device);
}

}  // namespace

DnnConv2d::DnnConv2d(const Geometry& g, DType dt, int device) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.g = g;
  m.dt = dt;
  m.device = device;
  const cudnnDataType_t type = dnn_type(dt);
  m.h = dnn_handle(device);
  TS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&m.xd));
  TS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&m.yd));
  TS_CUDNN_CHECK(cudnnCreateFilterDescriptor(&m.wd));
  TS_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&m.cd));
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  TS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(m.xd, CUDNN_TENSOR_NHWC, type, i32(g.n), i32(g.c), i32(g.h), i32(g.w)));
  TS_CUDNN_CHECK(cudnnSetFilter4dDescriptor(m.wd, type, CUDNN_TENSOR_NHWC, i32(g.k), i32(g.c), i32(g.r), i32(g.s)));
  TS_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(m.cd, i32(g.pad_h), i32(g.pad_w), i32(g.stride_h), i32(g.stride_w),
                                                 i32(g.dilation_h), i32(g.dilation_w), CUDNN_CROSS_CORRELATION,
                                                 CUDNN_DATA_FLOAT));
  TS_CUDNN_CHECK(cudnnSetConvolutionMathType(m.cd, CUDNN_TENSOR_OP_MATH));
  int n = 0, k = 0;
  TS_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(m.cd, m.xd, m.wd, &n, &k, &m.p, &m.q));
  TS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(m.yd, CUDNN_TENSOR_NHWC, type, n, k, m.p, m.q));

  // The algorithms, timed by cuDNN on scratch tensors.
  const TensorOptions opts = TensorOptions(dt).device(Device::cuda(device));
  const Tensor x = zeros({g.n, g.h, g.w, g.c}, opts), w = zeros({g.k, g.r, g.s, g.c}, opts);
  const Tensor y = zeros(output_shape(), opts);
  const Tensor ws = m.workspace(kFindWorkspace);
  int got = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[8];
  TS_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(m.h, m.xd, x.data_ptr(), m.wd, w.data_ptr(), m.cd, m.yd,
                                                        y.data_ptr(), 8, &got, fwd, ws.data_ptr(), kFindWorkspace));
  const auto f = fastest(fwd, got, "forward");
  m.fwd = f.algo;
  m.fwd_bytes = f.memory;
  cudnnConvolutionBwdDataAlgoPerf_t data[8];
  TS_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(m.h, m.wd, w.data_ptr(), m.yd, y.data_ptr(), m.cd, m.xd,
                                                             x.data_ptr(), 8, &got, data, ws.data_ptr(),
                                                             kFindWorkspace));
  const auto d = fastest(data, got, "data gradient");
  m.data = d.algo;
  m.data_bytes = d.memory;
  cudnnConvolutionBwdFilterAlgoPerf_t filter[8];
  TS_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(m.h, m.xd, x.data_ptr(), m.yd, y.data_ptr(), m.cd,
                                                               m.wd, w.data_ptr(), 8, &got, filter, ws.data_ptr(),
                                                               kFindWorkspace));
  const auto fl = fastest(filter, got, "filter gradient");
  m.filter = fl.algo;
  m.filter_bytes = fl.memory;
}

DnnConv2d::~DnnConv2d() {
  if (!impl_) return;
  cudnnDestroyConvolutionDescriptor(impl_->cd);
  cudnnDestroyFilterDescriptor(impl_->wd);
  cudnnDestroyTensorDescriptor(impl_->yd);
  cudnnDestroyTensorDescriptor(impl_->xd);
}

Shape DnnConv2d::output_shape() const { return {impl_->g.n, impl_->p, impl_->q, impl_->g.k}; }

void DnnConv2d::forward(const Tensor& x, const Tensor& filter, const Tensor& y) {
  Impl& m = *impl_;
  check_tensor(x, {m.g.n, m.g.h, m.g.w, m.g.c}, m.dt, m.device, "x");
  check_tensor(filter, {m.g.k, m.g.r, m.g.s, m.g.c}, m.dt, m.device, "filter");
  check_tensor(y, output_shape(), m.dt, m.device, "y");
  const Tensor ws = m.workspace(m.fwd_bytes);
  const float one = 1.f, zero = 0.f;
  TS_CUDNN_CHECK(cudnnConvolutionForward(m.h, &one, m.xd, x.data_ptr(), m.wd, filter.data_ptr(), m.cd, m.fwd,
                                         ws.data_ptr(), m.fwd_bytes, &zero, m.yd, y.data_ptr()));
}

void DnnConv2d::data_gradient(const Tensor& filter, const Tensor& dy, const Tensor& dx) {
  Impl& m = *impl_;
  check_tensor(filter, {m.g.k, m.g.r, m.g.s, m.g.c}, m.dt, m.device, "filter");
  check_tensor(dy, output_shape(), m.dt, m.device, "dy");
  check_tensor(dx, {m.g.n, m.g.h, m.g.w, m.g.c}, m.dt, m.device, "dx");
  const Tensor ws = m.workspace(m.data_bytes);
  const float one = 1.f, zero = 0.f;
  TS_CUDNN_CHECK(cudnnConvolutionBackwardData(m.h, &one, m.wd, filter.data_ptr(), m.yd, dy.data_ptr(), m.cd, m.data,
                                              ws.data_ptr(), m.data_bytes, &zero, m.xd, dx.data_ptr()));
}

void DnnConv2d::filter_gradient(const Tensor& x, const Tensor& dy, const Tensor& dfilter) {
  Impl& m = *impl_;
  check_tensor(x, {m.g.n, m.g.h, m.g.w, m.g.c}, m.dt, m.device, "x");
  check_tensor(dy, output_shape(), m.dt, m.device, "dy");
  check_tensor(dfilter, {m.g.k, m.g.r, m.g.s, m.g.c}, m.dt, m.device, "dfilter");
  const Tensor ws = m.workspace(m.filter_bytes);
  const float one = 1.f, zero = 0.f;
  TS_CUDNN_CHECK(cudnnConvolutionBackwardFilter(m.h, &one, m.xd, x.data_ptr(), m.yd, dy.data_ptr(), m.cd, m.filter,
                                                ws.data_ptr(), m.filter_bytes, &zero, m.wd, dfilter.data_ptr()));
}

}  // namespace cuda
}  // namespace tessera

#endif  // TESSERA_HAVE_CUDNN
