#include "kernels/edge_bias/edge_bias.h"

#include "kernels/common/dispatch.h"
#include "kernels/ops.h"

namespace tessera {

Tensor edge_bias(const Tensor& x, const Tensor& groups, const Tensor& gain, const Tensor& bias) {
  if (bias.defined()) return call<op::EdgeBias>({true}, {x, groups, gain, bias})[0];
  return call<op::EdgeBias>({false}, {x, groups, gain})[0];
}

namespace detail {

int64_t edge_bias_check(const char* op, const TensorMeta& x, const TensorMeta& groups, const TensorMeta& param,
                        const char* what) {
  check_floating(op, x, "x");
  TS_CHECK(x.shape.ndim() >= 2, ShapeError, op << ": x " << x.shape << " must be [N, spatial…, channels]");
  int64_t positions = 1;
  for (int d = 1; d + 1 < x.shape.ndim(); ++d) positions *= x.shape[d];
  const int64_t K = x.shape[x.shape.ndim() - 1];
  TS_CHECK(groups.dtype == DType::i32 && groups.shape == Shape({positions}), ShapeError,
           op << ": groups " << groups << " must be i32 [" << positions << "] (one per position of x " << x.shape
              << ")");
  TS_CHECK(groups.device == x.device, DeviceError, op << ": groups on " << groups.device << ", x on " << x.device);
  check_same_dtype(op, x, param);
  TS_CHECK(param.shape.ndim() == 2 && param.shape[1] == K, ShapeError,
           op << ": " << what << " " << param.shape << " must be [groups, " << K << "]");
  return positions;
}

}  // namespace detail

std::vector<TensorMeta> op::EdgeBias::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, attrs.bias ? 4 : 3);
  detail::edge_bias_check(kName, in[0], in[1], in[2], "gain");
  if (attrs.bias) {
    detail::edge_bias_check(kName, in[0], in[1], in[3], "bias");
    TS_CHECK(in[3].shape == in[2].shape, ShapeError,
             kName << ": bias " << in[3].shape << " and gain " << in[2].shape << " differ");
  }
  return {in[0]};
}

namespace {

template <class T>
void forward_kernel(const T* x, const int32_t* groups, const T* gain, const T* bias, T* y, int64_t n,
                    int64_t positions, int64_t K) {
#pragma omp parallel for if (n * positions * K > 100000)
  for (int64_t s = 0; s < n; ++s)
    for (int64_t p = 0; p < positions; ++p) {
      const int64_t e = groups[p], row = (s * positions + p) * K;
      if (e < 0) {
        for (int64_t k = 0; k < K; ++k) y[row + k] = x[row + k];
      } else {
        for (int64_t k = 0; k < K; ++k) y[row + k] = x[row + k] * gain[e * K + k] + (bias ? bias[e * K + k] : T(0));
      }
    }
}

}  // namespace

void op::EdgeBias::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  const int64_t positions = in[1].numel(), K = x.size(x.dim() - 1), E = in[2].size(0);
  const int32_t* groups = in[1].data<int32_t>();
  for (int64_t p = 0; p < positions; ++p)
    TS_CHECK(groups[p] >= -1 && groups[p] < E, ValueError,
             kName << ": group " << groups[p] << " at position " << p << " is outside [-1, " << E << ")");
  dispatch_float(x.dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward_kernel<T>(x.data<T>(), groups, in[2].data<T>(), attrs.bias ? in[3].data<T>() : nullptr, out[0].data<T>(),
                      x.size(0), positions, K);
  });
}

std::vector<Tensor> op::EdgeBias::backward(const BackwardContext& ctx, const Attrs& attrs) {
  const Tensor& g = ctx.grad_output();
  const Tensor &x = ctx.input(0), &groups = ctx.input(1), &gain = ctx.input(2);
  Tensor dx, dgain, dbias;
  if (ctx.needs_input_grad(0)) dx = call<op::EdgeBias>({false}, {g, groups, gain})[0];
  if (ctx.needs_input_grad(2) || (attrs.bias && ctx.needs_input_grad(3))) {
    std::vector<Tensor> d = call<op::EdgeBiasGrad>({gain.size(0)}, {x, g, groups});
    dgain = d[0];
    dbias = d[1];
  }
  if (attrs.bias) return {dx, Tensor(), dgain, dbias};
  return {dx, Tensor(), dgain};
}

}  // namespace tessera
