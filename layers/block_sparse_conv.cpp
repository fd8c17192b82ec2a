#include "layers/block_sparse_conv.h"

#include <cmath>

#include "core/autograd.h"
#include "core/tracer_pause.h"
#include "kernels/ops.h"
#include "layers/block_sparse_linear.h"

namespace tessera {
namespace nn {

namespace {

// The layout over (in, out) channels, or (out, in) for a transposed layer (F's).
LayoutPtr make_layout(const BlockSparseConvOptions& o) {
  const bool tr = o.transposed();
  return block_sparse::layer_layout(tr ? "BlockSparseConv (transposed: its layout is [out, in])" : "BlockSparseConv",
                                    o.layout(), tr ? o.out_channels() : o.in_channels(),
                                    tr ? o.in_channels() : o.out_channels(), o.block_size(), o.density(), o.seed());
}

// The squared norms of V over the stored blocks and taps of each output channel, as a row: for a
// convolution channel j is column j of the layout, 1 [1, C] · Σ_taps (V ⊙ V) -> [1, K]; for a
// transposed one it is row i, 1 [1, K] · (Σ_taps V ⊙ V)ᵀ -> [1, C].
Tensor channel_sq_norms(const Tensor& v, const LayoutPtr& l, bool transposed) {
  const int64_t nnz = l->nnz(), bs = l->block_size();
  const Tensor sq = sum(reshape(mul(v, v), {nnz, -1, bs, bs}), 1);  // [nnz, bs, bs]
  const int64_t ones = transposed ? l->out_features() : l->in_features();
  const Tensor one = fill(TensorMeta{Shape({1, ones}), v.dtype(), v.device()}, 1.0);
  return transposed ? bsmm_dx(one, sq, l) : bsmm(one, sq, l);
}

}  // namespace

BlockSparseConv::BlockSparseConv(const BlockSparseConvOptions& options, Generator& gen)
    : options_(options), layout_(make_layout(options)) {
  const DType dt = options.dtype();
  TS_CHECK(is_floating(dt), DTypeError, "BlockSparseConv: parameter dtype " << dt << " is not floating");
  // the geometry's own checks (kernel, stride, dilation, padding) with an input of the filter's span
  std::vector<int64_t> probe;
  for (size_t d = 0; d < options.kernel().size(); ++d) probe.push_back(64);
  TS_CHECK(!options.transposed() || options.padding() != ConvPadding::causal, ValueError,
           "BlockSparseConv: a transposed convolution takes valid, same or explicit padding, not causal");
  for (size_t d = 0; d < options.output_padding().size(); ++d) {
    const std::vector<int64_t>& st = options.stride();
    const int64_t s = st.empty() ? 1 : st.size() == 1 ? st[0] : st[std::min(d, st.size() - 1)];
    const int64_t p = options.output_padding()[d];
    TS_CHECK(options.transposed() && p >= 0 && p < s, ValueError,
             "BlockSparseConv: output_padding " << p << " needs transposed(true) and must be in [0, stride " << s
                                                << ")");
  }
  const ConvGeometry g = geometry(probe);
  const int64_t nnz = layout_->nnz(), bs = layout_->block_size(), taps = g.taps();
  const int64_t out = options.out_channels();
  const double fan_in = static_cast<double>(nnz * taps * bs * bs) / static_cast<double>(out);
  const double std = options.init_std() > 0 ? options.init_std() : 1.0 / std::sqrt(fan_in);
  weight_ = register_parameter("weight", normal(detail::bsconv_weight_shape(*layout_, g), 0.0, std, gen, dt));
  if (options.bias()) bias_ = register_parameter("bias", zeros({out}, dt));
  if (options.weight_norm()) {
    NoGradGuard no_grad;  // gain = the initial channel norms: W = V until training moves them apart
    const Tensor n = reshape(sqrt(channel_sq_norms(weight_.detach(), layout_, options.transposed())), {out});
    gain_ = register_parameter("gain", n.clone().detach());
  }
}

ConvGeometry BlockSparseConv::geometry(const std::vector<int64_t>& in) const {
  const BlockSparseConvOptions& o = options_;
  const std::vector<int64_t> sizes = o.transposed() ? output_spatial(in) : in;
  return conv_geometry(sizes, o.kernel(), o.stride(), o.dilation(), o.padding(), o.pad_lo(), o.pad_hi());
}

std::vector<int64_t> BlockSparseConv::output_spatial(const std::vector<int64_t>& in) const {
  const BlockSparseConvOptions& o = options_;
  if (!o.transposed()) {
    return conv_geometry(in, o.kernel(), o.stride(), o.dilation(), o.padding(), o.pad_lo(), o.pad_hi())
        .out_spatial(in, "BlockSparseConv");
  }
  // the pads of valid / explicit padding do not depend on the size: take them from any geometry
  const ConvGeometry g0 = o.padding() == ConvPadding::same
                              ? ConvGeometry{}
                              : conv_geometry({}, o.kernel(), o.stride(), o.dilation(), o.padding(), o.pad_lo(), o.pad_hi());
  std::vector<int64_t> out(in.size());
  for (size_t d = 0; d < in.size(); ++d) {
    const std::vector<int64_t>& st = o.stride();
    const int64_t s = st.empty() ? 1 : st.size() == 1 ? st[0] : st[d];
    const int64_t extra = o.output_padding().empty() ? 0
                          : o.output_padding().size() == 1 ? o.output_padding()[0] : o.output_padding()[d];
    if (o.padding() == ConvPadding::same) {
      out[d] = in[d] * s;
    } else {
      const int dd = static_cast<int>(d);
      out[d] = (in[d] - 1) * s - g0.pad_lo[dd] - g0.pad_hi[dd] + g0.dilation[dd] * (g0.kernel[dd] - 1) + 1 + extra;
    }
    TS_CHECK(in[d] >= 1 && out[d] >= 1, ShapeError,
             "BlockSparseConv: input size " << in[d] << " of spatial dimension " << d
                                            << " gives no output of the transposed convolution");
  }
  return out;
}

Tensor BlockSparseConv::effective_weight() const {
  if (!gain_.defined()) return weight_;
  const bool tr = options_.transposed();
  const int64_t out = options_.out_channels(), nnz = layout_->nnz(), bs = layout_->block_size();
  // s [out] = gain / ||V[…, j]||, spread to every stored block and tap: a convolution's channel j is
  // s[c·bs + j] at [k, i, j] (1ᵀ·s per block), a transposed one's s[r·bs + i] (sᵀ·1 per block)
  const Tensor s =
      mul(gain_, rsqrt(clamp(reshape(channel_sq_norms(weight_, layout_, tr), {out}), block_sparse::kWeightNormSqFloor,
                             std::nullopt)));
  const int64_t ones = tr ? layout_->out_features() : layout_->in_features();
  const Tensor one = fill(TensorMeta{Shape({1, ones}), weight_.dtype(), weight_.device()}, 1.0);
  const Tensor row = reshape(s, {1, out});
  const Tensor spread = reshape(tr ? bsmm_dw(row, one, layout_) : bsmm_dw(one, row, layout_), {nnz, 1, bs, bs});
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
  const int64_t channels = options_.in_channels();
  TS_CHECK(x.dim() == dims + 2 && x.size(x.dim() - 1) == channels, ShapeError,
           "BlockSparseConv: x " << x.meta() << " must be [N, " << (dims == 1 ? "T" : dims == 2 ? "H, W" : "D, H, W")
                                 << ", " << channels << "] (" << layout_->str() << ")");
  std::vector<int64_t> in;
  for (int d = 0; d < dims; ++d) in.push_back(x.size(d + 1));
  Tensor y = options_.transposed() ? bsconv_dx(x, effective_weight(), layout_, geometry(in), output_spatial(in))
                                   : bsconv(x, effective_weight(), layout_, geometry(in));
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
    TracerPause concrete;  // made once, outside a trace: a constant on y's device
    it = index_.emplace(key, from_vector<int32_t>(e.group, Shape({n})).to(y.device())).first;
  }
  return edge_bias(y, it->second, gain_, bias_);
}

}  // namespace nn
}  // namespace tessera
