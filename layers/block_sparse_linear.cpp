#include "layers/block_sparse_linear.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/sparse/generators.h"
#include "kernels/ops.h"

namespace tessera {
namespace nn {

namespace {

LayoutPtr make_layout(const BlockSparseLinearOptions& o) {
  return block_sparse::layer_layout("BlockSparseLinear", o.layout(), o.in_features(), o.out_features(),
                                    o.block_size(), o.density(), o.seed());
}

// Each bs×bs block an orthogonal matrix: Q of the QR factorization of a standard normal matrix,
// with the signs of R's diagonal moved into Q (so Q is uniformly distributed, not biased by
// the factorization's sign convention).
Tensor orthogonal_blocks(int64_t nnz, int64_t bs, Generator& gen, DType dtype) {
  std::vector<double> v = normal({nnz, bs, bs}, 0.0, 1.0, gen, DType::f64).to_vector<double>();
  using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  for (int64_t k = 0; k < nnz; ++k) {
    Eigen::Map<Mat> block(v.data() + k * bs * bs, bs, bs);
    Eigen::HouseholderQR<Mat> qr(block);
    Mat q = qr.householderQ();
    const Mat r = qr.matrixQR().triangularView<Eigen::Upper>();
    for (int64_t j = 0; j < bs; ++j)
      if (r(j, j) < 0) q.col(j) *= -1.0;
    block = q;
  }
  return from_vector(v, {nnz, bs, bs}, dtype);
}

// Diagonal blocks (block row == block column) identity, the others zero.
Tensor identity_blocks(const BlockLayout& l, DType dtype) {
  const int64_t bs = l.block_size();
  std::vector<double> v(static_cast<size_t>(l.nnz() * bs * bs), 0.0);
  for (int64_t k = 0; k < l.nnz(); ++k)
    if (l.block_row()[k] == l.block_col()[k])
      for (int64_t i = 0; i < bs; ++i) v[(k * bs + i) * bs + i] = 1.0;
  return from_vector(v, {l.nnz(), bs, bs}, dtype);
}

// ||V[:, j]||² over the stored blocks, as a [1, out] row: 1 [1, in] · (V ⊙ V) block-sparse.
Tensor column_sq_norms(const Tensor& v, const LayoutPtr& l) {
  Tensor one = fill(TensorMeta{Shape({1, l->in_features()}), v.dtype(), v.device()}, 1.0);
  return bsmm(one, mul(v, v), l);
}

}  // namespace

BlockSparseLinearOptions::BlockSparseLinearOptions(const LayoutPtr& layout)
    : in_(layout ? layout->in_features() : 0),
      out_(layout ? layout->out_features() : 0),
      bs_(layout ? layout->block_size() : 0),
      layout_(layout) {
  TS_CHECK(layout != nullptr, ValueError, "BlockSparseLinearOptions: the layout is null");
}

BlockSparseLinear::BlockSparseLinear(const BlockSparseLinearOptions& options, Generator& gen)
    : options_(options), layout_(make_layout(options)) {
  const int64_t nnz = layout_->nnz(), bs = layout_->block_size(), out = layout_->out_features();
  const DType dt = options.dtype();
  TS_CHECK(is_floating(dt), DTypeError, "BlockSparseLinear: parameter dtype " << dt << " is not floating");
  const double fan_in = static_cast<double>(nnz * bs * bs) / static_cast<double>(out);  // inputs per output
  const double bound = 1.0 / std::sqrt(std::max(fan_in, 1.0));
  Tensor w;
  switch (options.init()) {
    case BlockSparseInit::normal: {
      const double std = options.init_std() > 0 ? options.init_std() : 1.0 / std::sqrt(fan_in);
      w = normal({nnz, bs, bs}, 0.0, std, gen, dt);
      break;
    }
    case BlockSparseInit::uniform: w = uniform({nnz, bs, bs}, -bound, bound, gen, dt); break;
    case BlockSparseInit::orthogonal: w = orthogonal_blocks(nnz, bs, gen, dt); break;
    case BlockSparseInit::identity: w = identity_blocks(*layout_, dt); break;
  }
  weight_ = register_parameter("weight", w);
  if (options.bias())
    bias_ = register_parameter("bias", options.init() == BlockSparseInit::uniform
                                           ? uniform({out}, -bound, bound, gen, dt)
                                           : zeros({out}, dt));
  if (options.gate()) gate_ = register_parameter("gate", ones({nnz}, dt));
  if (options.weight_norm()) {
    // gain = the initial column norms, so that W = V until training moves them apart.
    NoGradGuard no_grad;
    Tensor g = reshape(sqrt(column_sq_norms(weight_.detach(), layout_)), {out});
    gain_ = register_parameter("gain", g.clone().detach());
  }
}

Tensor BlockSparseLinear::effective_weight() const {
  if (!gain_.defined()) return weight_;
  const int64_t out = layout_->out_features();
  // s [out] = gain / ||V[:, j]||, spread to every stored block as s[c*bs + j] at [k, i, j].
  Tensor s = mul(gain_, rsqrt(clamp(reshape(column_sq_norms(weight_, layout_), {out}), block_sparse::kWeightNormSqFloor,
                                    std::nullopt)));
  Tensor one = fill(TensorMeta{Shape({1, layout_->in_features()}), weight_.dtype(), weight_.device()}, 1.0);
  return mul(weight_, bsmm_dw(one, reshape(s, {1, out}), layout_));
}

LayoutPtr block_sparse::layer_layout(const std::string& layer, const LayoutPtr& given, int64_t in, int64_t out,
                                     int64_t bs, double density, uint64_t seed) {
  if (given) {
    const BlockLayout& l = *given;
    TS_CHECK(l.in_features() == in && l.out_features() == out && l.block_size() == bs, ShapeError,
             layer << ": layout " << l.str() << " does not match in " << in << ", out " << out << ", block size "
                   << bs);
    return given;
  }
  TS_CHECK(density > 0 && density <= 1, ValueError, layer << ": density " << density << " must be in (0, 1]");
  if (density >= 1) return dense_layout(in, out, bs);
  return random_layout(in, out, bs, density, seed);
}

void BlockSparseLinear::set_layout(LayoutPtr layout) {
  TS_CHECK(layout != nullptr, ValueError, "BlockSparseLinear::set_layout: no layout given");
  const BlockLayout &now = *layout_, &l = *layout;
  TS_CHECK(l.in_features() == now.in_features() && l.out_features() == now.out_features() &&
               l.block_size() == now.block_size() && l.nnz() == now.nnz(),
           ShapeError,
           "BlockSparseLinear::set_layout: " << l.str() << " must have the sizes, block size and block count of the "
                                             << "layer's " << now.str());
  layout_ = std::move(layout);
  options_.layout(layout_);
  advance_layout_generation();
}

Tensor BlockSparseLinear::forward(const Tensor& x) const { return product(x, std::nullopt); }

Tensor BlockSparseLinear::forward(const Tensor& x, DType out) const { return product(x, out); }

Tensor BlockSparseLinear::product(const Tensor& x, std::optional<DType> out) const {
  const int64_t in = layout_->in_features();
  TS_CHECK(x.dim() >= 1 && x.size(x.dim() - 1) == in, ShapeError,
           "BlockSparseLinear: x " << x.meta() << " must have last dim " << in << " (" << layout_->str() << ")");
  std::vector<int64_t> out_shape = x.shape().vec();
  out_shape.back() = layout_->out_features();
  // [..., in] -> [rows, in] -> [rows, out] -> [..., out] (reshapes are views).
  // The bias is added in the product's epilogue (no pass over y).
  const Tensor x2 = x.dim() == 2 ? x : reshape(x, {-1, in});
  const Tensor y = out ? bsmm(x2, effective_weight(), layout_, gate_, bias_, *out)
                       : bsmm(x2, effective_weight(), layout_, gate_, bias_);
  return x.dim() == 2 ? y : reshape(y, out_shape);
}

}  // namespace nn
}  // namespace tessera
