#include "layers/block_sparse_conv.h"

#include <cmath>

#include "core/autograd.h"
#include "core/sparse/generators.h"
#include "kernels/ops.h"

namespace tessera {
namespace nn {

namespace {

// The floor under squared channel norms (BlockSparseLinear's): channels without stored blocks stay finite.
constexpr double kSqNormFloor = 1e-30;

LayoutPtr make_layout(const BlockSparseConvOptions& o) {
  const int64_t in = o.in_channels(), out = o.out_channels(), bs = o.block_size();
  if (o.layout()) {
    const BlockLayout& l = *o.layout();
    TS_CHECK(l.in_features() == in && l.out_features() == out && l.block_size() == bs, ShapeError,
             "BlockSparseConv: layout " << l.str() << " does not match in " << in << ", out " << out
                                        << ", block size " << bs);
    return o.layout();
  }
  TS_CHECK(o.density() > 0 && o.density() <= 1, ValueError,
           "BlockSparseConv: density " << o.density() << " must be in (0, 1]");
  if (o.density() >= 1) return dense_layout(in, out, bs);
  return random_layout(in, out, bs, o.density(), o.seed());
}

// ||V[…, j]||² over the stored blocks and taps of output channel j, as a [1, K] row:
// 1 [1, C] · Σ_taps (V ⊙ V), block-sparse.
Tensor channel_sq_norms(const Tensor& v, const LayoutPtr& l) {
  const int64_t nnz = l->nnz(), bs = l->block_size();
  const Tensor sq = sum(reshape(mul(v, v), {nnz, -1, bs, bs}), 1);  // [nnz, bs, bs]
  const Tensor one = fill(TensorMeta{Shape({1, l->in_features()}), v.dtype(), v.device()}, 1.0);
  return bsmm(one, sq, l);
}

}  // namespace

BlockSparseConv::BlockSparseConv(const BlockSparseConvOptions& options, Generator& gen)
    : options_(options), layout_(make_layout(options)) {
  const DType dt = options.dtype();
  TS_CHECK(is_floating(dt), DTypeError, "BlockSparseConv: parameter dtype " << dt << " is not floating");
  // the geometry's own checks (kernel, stride, dilation, padding) with an input of the filter's span
  std::vector<int64_t> probe;
  for (size_t d = 0; d < options.kernel().size(); ++d) probe.push_back(64);
  const ConvGeometry g = geometry(probe);
  const int64_t nnz = layout_->nnz(), bs = layout_->block_size(), out = layout_->out_features(), taps = g.taps();
  const double fan_in = static_cast<double>(nnz * taps * bs * bs) / static_cast<double>(out);
  const double std = options.init_std() > 0 ? options.init_std() : 1.0 / std::sqrt(fan_in);
  weight_ = register_parameter("weight", normal(detail::bsconv_weight_shape(*layout_, g), 0.0, std, gen, dt));
  if (options.bias()) bias_ = register_parameter("bias", zeros({out}, dt));
  if (options.weight_norm()) {
    NoGradGuard no_grad;  // gain = the initial channel norms: W = V until training moves them apart
    const Tensor n = reshape(sqrt(channel_sq_norms(weight_.detach(), layout_)), {out});
    gain_ = register_parameter("gain", n.clone().detach());
  }
}

ConvGeometry BlockSparseConv::geometry(const std::vector<int64_t>& in) const {
  const BlockSparseConvOptions& o = options_;
  return conv_geometry(in, o.kernel(), o.stride(), o.dilation(), o.padding(), o.pad_lo(), o.pad_hi());
}

Tensor BlockSparseConv::effective_weight() const {
  if (!gain_.defined()) return weight_;
  const int64_t out = layout_->out_features(), nnz = layout_->nnz(), bs = layout_->block_size();
  // s [K] = gain / ||V[…, j]||, spread to every stored block as s[c·bs + j] at [k, i, j], and over the taps
  const Tensor s =
      mul(gain_, rsqrt(clamp(reshape(channel_sq_norms(weight_, layout_), {out}), kSqNormFloor, std::nullopt)));
  const Tensor one = fill(TensorMeta{Shape({1, layout_->in_features()}), weight_.dtype(), weight_.device()}, 1.0);
  const Tensor spread = reshape(bsmm_dw(one, reshape(s, {1, out}), layout_), {nnz, 1, bs, bs});
  return reshape(mul(reshape(weight_, {nnz, -1, bs, bs}), spread), weight_.shape().vec());
}

void BlockSparseConv::set_layout(LayoutPtr layout) {
  TS_CHECK(layout != nullptr, ValueError, "BlockSparseConv::set_layout: no layout given");
  const BlockLayout &now = *layout_, &l = *layout;
  TS_CHECK(l.in_features() == now.in_features() && l.out_features() == now.out_features() &&
               l.block_size() == now.block_size() && l.nnz() == now.nnz(),
           ShapeError,
           "BlockSparseConv::set_layout: " << l.str() << " must have the sizes, block size and block count of the "
                                           << "layer's " << now.str());
  layout_ = std::move(layout);
  options_.layout(layout_);
  advance_layout_generation();
}

Tensor BlockSparseConv::forward(const Tensor& x) const {
  const int dims = static_cast<int>(options_.kernel().size());
  TS_CHECK(x.dim() == dims + 2 && x.size(x.dim() - 1) == layout_->in_features(), ShapeError,
           "BlockSparseConv: x " << x.meta() << " must be [N, " << (dims == 1 ? "T" : dims == 2 ? "H, W" : "D, H, W")
                                 << ", " << layout_->in_features() << "] (" << layout_->str() << ")");
  std::vector<int64_t> in;
  for (int d = 0; d < dims; ++d) in.push_back(x.size(d + 1));
  Tensor y = bsconv(x, effective_weight(), layout_, geometry(in));
  if (bias_.defined()) y = add(y, bias_);  // [N, out…, K] + [K]
  return y;
}

EdgeBias::EdgeBias(const ConvGeometry& g, const std::vector<int64_t>& in, int64_t channels, DType dtype)
    : geometry_(g), count_(edge_groups(g, in).count), channels_(channels) {
  TS_CHECK(count_ > 0, ValueError,
           "EdgeBias: the convolution (" << g.str() << ") reads no padding for inputs of size " << Shape(in));
  TS_CHECK(channels > 0, ValueError, "EdgeBias: " << channels << " channels");
  TS_CHECK(is_floating(dtype), DTypeError, "EdgeBias: parameter dtype " << dtype << " is not floating");
  gain_ = register_parameter("gain", ones({count_, channels}, dtype));
  bias_ = register_parameter("bias", zeros({count_, channels}, dtype));
}

Tensor EdgeBias::forward(const Tensor& y, const std::vector<int64_t>& in) const {
  TS_CHECK(static_cast<int>(in.size()) == geometry_.dims, ShapeError,
           "EdgeBias: " << in.size() << " input sizes for a " << geometry_.dims << "-D convolution");
  std::vector<int64_t> dims{y.dim() > 0 ? y.size(0) : 0};
  for (int64_t o : geometry_.out_spatial(in, "EdgeBias")) dims.push_back(o);
  dims.push_back(channels_);
  const Shape want(dims);
  TS_CHECK(y.shape() == want, ShapeError,
           "EdgeBias: y " << y.meta() << " must be " << want << ", the output of " << geometry_.str()
                          << " for inputs of size " << Shape(in));
  auto key = std::make_pair(in, y.device().str());
  auto it = index_.find(key);
  if (it == index_.end()) {
    const EdgeGroups e = edge_groups(geometry_, in);
    TS_CHECK(e.count == count_, ShapeError,
             "EdgeBias: inputs of size " << Shape(in) << " give " << e.count << " edge groups, the layer has "
                                         << count_);
    const int64_t n = static_cast<int64_t>(e.group.size());
    it = index_.emplace(key, from_vector<int32_t>(e.group, Shape({n})).to(y.device())).first;
  }
  return edge_bias(y, it->second, gain_, bias_);
}

}  // namespace nn
}  // namespace tessera
