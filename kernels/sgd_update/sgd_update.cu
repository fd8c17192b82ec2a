// sgd_update on the GPU, elementwise over p [*] (the math of sgd_update.h):
//   g' = g + wd·p
//   buf' = momentum == 0 ? buf : (t == 1 ? g' : momentum·buf + (1 − dampening)·g')
//   d = momentum == 0 ? g' : (nesterov ? g' + momentum·buf' : buf'),   p' = p − lr·d
// lr and t are read inside the kernel from their 0-d f64 device tensors (a captured CUDA graph
// replays the step with new values; nothing is copied to the host). One thread per element,
// in acc_t; element i of every input is loaded before element i of an output is stored, so
// p' and buf' may alias p and buf.
#include "core/cuda/check.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/sgd_update/sgd_update.h"

namespace tessera {

namespace {

template <class T>
__global__ void sgd_kernel(const T* p, const T* g, const T* buf, const double* lr_t, const double* step_t, T* p_out,
                           T* buf_out, int64_t n, double momentum, double dampening, double weight_decay,
                           bool nesterov) {
  using A = cuda::acc_t<T>;
  const A lr = static_cast<A>(*lr_t), mu = static_cast<A>(momentum), wd = static_cast<A>(weight_decay);
  const A one_minus_damp = static_cast<A>(1.0 - dampening);
  const bool use_momentum = momentum != 0, first = *step_t == 1.0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const A pi = cuda::to_acc(p[i]), bi = cuda::to_acc(buf[i]);
    const A gi = cuda::to_acc(g[i]) + wd * pi;
    A d = gi, b = bi;
    if (use_momentum) {
      b = first ? gi : mu * bi + one_minus_damp * gi;
      d = nesterov ? gi + mu * b : b;
    }
    buf_out[i] = cuda::from_acc<T>(b);
    p_out[i] = cuda::from_acc<T>(pi - lr * d);
  }
}

}  // namespace

void op::SgdUpdate::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  const int64_t n = out[0].numel();
  if (n == 0) return;
  cuda::dispatch_cuda_float(out[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    sgd_kernel<<<cuda::blocks_for(n), 256, 0, cuda::current_stream(out[0])>>>(
        static_cast<const T*>(in[0].data_ptr()), static_cast<const T*>(in[1].data_ptr()),
        static_cast<const T*>(in[2].data_ptr()), static_cast<const double*>(in[3].data_ptr()),
        static_cast<const double*>(in[4].data_ptr()), static_cast<T*>(out[0].data_ptr()),
        static_cast<T*>(out[1].data_ptr()), n, a.momentum, a.dampening, a.weight_decay, a.nesterov);
  });
  TS_CUDA_LAUNCH_CHECK(kName);
}

}  // namespace tessera
