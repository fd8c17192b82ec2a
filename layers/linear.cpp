#include "layers/linear.h"

#include <cmath>

#include "kernels/ops.h"

namespace tessera {
namespace nn {

Linear::Linear(const LinearOptions& options, Generator& gen) : options_(options) {
  const int64_t in = options.in_features(), out = options.out_features();
  TS_CHECK(in > 0 && out > 0, ValueError, "Linear: in_features (" << in << ") and out_features (" << out
                                                                 << ") must be > 0");
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  weight_ = register_parameter("weight", uniform({in, out}, -bound, bound, gen, options.dtype()));
  if (options.bias()) bias_ = register_parameter("bias", uniform({out}, -bound, bound, gen, options.dtype()));
}

Tensor Linear::forward(const Tensor& x) const { return product(x, std::nullopt); }

Tensor Linear::forward(const Tensor& x, DType out) const { return product(x, out); }

Tensor Linear::product(const Tensor& x, std::optional<DType> out) const {
  const int64_t in = options_.in_features();
  TS_CHECK(x.dim() >= 1 && x.size(-1) == in, ShapeError,
           "Linear: x " << x.meta() << " must have last dim " << in << " for weight " << weight_.meta());
  // [..., in] -> [rows, in] -> [rows, out] -> [..., out] (reshapes are views).
  std::vector<int64_t> out_shape = x.shape().vec();
  out_shape.back() = options_.out_features();
  // y = x·W + b in one op (on CUDA the GEMM's epilogue adds b); matmul alone without a bias.
  const Tensor x2 = x.dim() == 2 ? x : reshape(x, {-1, in});
  Tensor y = out ? linear(x2, weight_, bias_, *out) : linear(x2, weight_, bias_);
  return x.dim() == 2 ? y : reshape(y, out_shape);
}

}  // namespace nn
}  // namespace tessera
