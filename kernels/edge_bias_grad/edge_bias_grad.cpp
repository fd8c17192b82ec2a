#include "kernels/edge_bias_grad/edge_bias_grad.h"

#include <algorithm>

#include "kernels/common/dispatch.h"
#include "kernels/edge_bias/edge_bias.h"
#include "kernels/ops.h"

namespace tessera {

std::pair<Tensor, Tensor> edge_bias_grad(const Tensor& x, const Tensor& dy, const Tensor& groups, int64_t count) {
  std::vector<Tensor> d = call<op::EdgeBiasGrad>({count}, {x, dy, groups});
  return {d[0], d[1]};
}

std::vector<TensorMeta> op::EdgeBiasGrad::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 3);
  TS_CHECK(attrs.count >= 0, ValueError, kName << ": " << attrs.count << " groups");
  check_same_dtype(kName, in[0], in[1]);
  TS_CHECK(in[0].shape == in[1].shape, ShapeError, kName << ": dy " << in[1].shape << " must match x " << in[0].shape);
  const int64_t K = in[0].shape.ndim() >= 2 ? in[0].shape[in[0].shape.ndim() - 1] : 0;
  const TensorMeta param{Shape({attrs.count, K}), in[0].dtype, in[0].device};
  detail::edge_bias_check(kName, in[0], in[2], param, "gradient");
  return {param, param};
}

namespace {

// Per channel k (a task per chunk of 64 channels): the sums over n, then positions, in order.
template <class T>
void grad_kernel(const T* x, const T* dy, const int32_t* groups, T* dgain, T* dbias, int64_t n, int64_t positions,
                 int64_t K, int64_t E) {
  std::fill(dgain, dgain + E * K, T(0));
  std::fill(dbias, dbias + E * K, T(0));
  constexpr int64_t kChunk = 64;
  const int64_t chunks = (K + kChunk - 1) / kChunk;
#pragma omp parallel for if (n * positions * K > 100000)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t k0 = ch * kChunk, k1 = std::min(K, k0 + kChunk);
    for (int64_t s = 0; s < n; ++s)
      for (int64_t p = 0; p < positions; ++p) {
        const int64_t e = groups[p];
        if (e < 0 || e >= E) continue;
        const int64_t row = (s * positions + p) * K;
        for (int64_t k = k0; k < k1; ++k) {
          dgain[e * K + k] += dy[row + k] * x[row + k];
          dbias[e * K + k] += dy[row + k];
        }
      }
  }
}

}  // namespace

void op::EdgeBiasGrad::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  dispatch_float(x.dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    grad_kernel<T>(x.data<T>(), in[1].data<T>(), in[2].data<int32_t>(), out[0].data<T>(), out[1].data<T>(), x.size(0),
                   in[2].numel(), x.size(x.dim() - 1), attrs.count);
  });
}

}  // namespace tessera
