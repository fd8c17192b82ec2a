// nn::BlockSparseConv: a convolution whose channel connectivity is a BlockLayout over (in, out)
// channels, each stored block a dense filter over the taps (bsconv, kernels/bsconv/bsconv.h), with
// an optional bias and weight norm per output channel; and nn::EdgeBias, a learned gain and bias
// per output channel for the output positions whose receptive field reaches into the padding.
// Channels last: x [N, T, C] (1-D), [N, H, W, C] (2-D), [N, D, H, W, C] (3-D).
//
//   Generator gen(0);
//   nn::BlockSparseConv conv(nn::BlockSparseConvOptions(256, 256, {3}, 32).dilation({4})
//                                .padding(ConvPadding::causal).density(0.25, 7), gen);
//   Tensor y = conv.forward(x);                                   // [N, T, 256] -> [N, T, 256]
//   nn::EdgeBias edge(conv.geometry({T}), {T}, 256);
//   y = edge.forward(y, {T});                                     // the first 8 steps rescaled
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "core/random.h"
#include "core/sparse/block_layout.h"
#include "kernels/common/conv_geometry.h"
#include "layers/module.h"

namespace tessera {
namespace nn {

/// Options of BlockSparseConv: channels, the filter's spatial sizes (1-3 of them) and the block
/// size; the layout given (layout(l)) or generated (dense, or random at density(d, seed) < 1).
struct BlockSparseConvOptions {
  BlockSparseConvOptions(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel,
                         int64_t block_size = 32)
      : in_(in_channels), out_(out_channels), bs_(block_size), kernel_(std::move(kernel)) {}

  /// One value, or one per spatial dimension (default 1).
  BlockSparseConvOptions& stride(std::vector<int64_t> s) { stride_ = std::move(s); return *this; }
  BlockSparseConvOptions& dilation(std::vector<int64_t> d) { dilation_ = std::move(d); return *this; }
  /// valid (the default), same or causal (1-D); explicit pads with pads(lo, hi).
  BlockSparseConvOptions& padding(ConvPadding p) { padding_ = p; return *this; }
  BlockSparseConvOptions& pads(std::vector<int64_t> lo, std::vector<int64_t> hi) {
    padding_ = ConvPadding::explicit_pads;
    pad_lo_ = std::move(lo);
    pad_hi_ = std::move(hi);
    return *this;
  }
  BlockSparseConvOptions& layout(LayoutPtr l) { layout_ = std::move(l); return *this; }
  BlockSparseConvOptions& density(double d, uint64_t seed = 0) { density_ = d; seed_ = seed; return *this; }
  BlockSparseConvOptions& bias(bool on) { bias_ = on; return *this; }
  BlockSparseConvOptions& weight_norm(bool on) { weight_norm_ = on; return *this; }
  /// Standard deviation of the normal init; <= 0 (the default): 1/sqrt(fan_in).
  BlockSparseConvOptions& init_std(double s) { init_std_ = s; return *this; }
  /// The transposed convolution (deconvolution): see BlockSparseConv. Valid, same or explicit
  /// padding (not causal); output_padding (one value or one per dimension, each < stride) adds
  /// output positions at the high end where the size is not fixed by the input's.
  BlockSparseConvOptions& transposed(bool on) { transposed_ = on; return *this; }
  BlockSparseConvOptions& output_padding(std::vector<int64_t> p) { output_padding_ = std::move(p); return *this; }
  BlockSparseConvOptions& dtype(DType t) { dtype_ = t; return *this; }

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  int64_t block_size() const { return bs_; }
  const std::vector<int64_t>& kernel() const { return kernel_; }
  const std::vector<int64_t>& stride() const { return stride_; }
  const std::vector<int64_t>& dilation() const { return dilation_; }
  ConvPadding padding() const { return padding_; }
  const std::vector<int64_t>& pad_lo() const { return pad_lo_; }
  const std::vector<int64_t>& pad_hi() const { return pad_hi_; }
  const LayoutPtr& layout() const { return layout_; }
  double density() const { return density_; }
  uint64_t seed() const { return seed_; }
  bool bias() const { return bias_; }
  bool weight_norm() const { return weight_norm_; }
  double init_std() const { return init_std_; }
  DType dtype() const { return dtype_; }
  bool transposed() const { return transposed_; }
  const std::vector<int64_t>& output_padding() const { return output_padding_; }

 private:
  int64_t in_, out_, bs_;
  std::vector<int64_t> kernel_, stride_, dilation_, pad_lo_, pad_hi_, output_padding_;
  ConvPadding padding_ = ConvPadding::valid;
  LayoutPtr layout_;
  double density_ = 1.0;
  uint64_t seed_ = 0;
  bool bias_ = true, weight_norm_ = false, transposed_ = false;
  double init_std_ = 0.0;
  DType dtype_ = DType::f32;
};

/// forward(x [N, in…, C]) = bsconv(x, W, layout, geometry(in…)) + bias -> [N, out…, K].
///
/// Parameters: "weight" [nnz, kernel…, bs, bs], "bias" [K] (zeros; when bias()), "gain" [K] (when
/// weight_norm()). With weight norm the stored weight is a direction V and each output channel j
/// is rescaled to norm gain[j] over all its stored blocks and taps:
///   W[…, j] = gain[j] · V[…, j] / ||V[…, j]||   (||V[…, j]||² = bsmm(1, Σ_taps V ⊙ V)[j], floored at
///   1e-30), gain starting at the initial norms, so W = V at initialization (BlockSparseLinear's rule).
/// fan_in (for the default normal std) is the mean number of stored inputs per output channel over
/// the taps, nnz·taps·bs²/K. num_parameters() counts stored blocks only.
///
/// transposed(true): the transposed convolution (deconvolution), the input gradient of the
/// convolution F from out_channels to in_channels with this geometry: forward(x [N, in…, in_ch]) =
/// bsconv_dx(x, W, layout, g, out…) + bias -> [N, out…, out_ch], the layout over (out_ch, in_ch) (F's
/// rows are this layer's outputs) and out[d] = (in[d] − 1)·stride − pad_lo − pad_hi + dilation·(k − 1)
/// + 1 + output_padding (valid, explicit), or in[d]·stride (same: F's same padding for that size).
/// Weight norm is then per output channel = per row of the layout, over its blocks and taps.
class BlockSparseConv : public Module {
 public:
  /// ValueError / ShapeError naming the bad option (channels, block size, density, kernel, stride,
  /// dilation, padding, a layout whose sizes differ).
  explicit BlockSparseConv(const BlockSparseConvOptions& options, Generator& gen = default_generator());

  /// ShapeError naming x and the layer's sizes when x is not [N, spatial…, C] or too small.
  Tensor forward(const Tensor& x) const;
  /// The geometry for inputs of spatial sizes `in` (same and causal padding depend on them); for a
  /// transposed layer, that of F, whose inputs are this layer's outputs (output_spatial(in)).
  ConvGeometry geometry(const std::vector<int64_t>& in) const;
  /// The output spatial sizes for inputs of spatial sizes `in` (ShapeError when too small).
  std::vector<int64_t> output_spatial(const std::vector<int64_t>& in) const;
  /// The filter weights the forward uses: weight, or its weight-normalized version.
  Tensor effective_weight() const;

  const LayoutPtr& layout() const { return layout_; }
  /// Another layout of the same sizes, block size and block count (BlockSparseLinear::set_layout's rule).
  void set_layout(LayoutPtr layout);
  ModuleLayouts layouts() const override { return {layout_, nullptr}; }
  void set_block_layout(LayoutPtr layout) override { set_layout(std::move(layout)); }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  const Tensor& gain() const { return gain_; }
  const BlockSparseConvOptions& options() const { return options_; }

 private:
  BlockSparseConvOptions options_;
  LayoutPtr layout_;
  Tensor weight_, bias_, gain_;
};

/// forward(y [N, out…, K], in) = edge_bias(y, groups, gain, bias) (kernels/edge_bias/edge_bias.h):
/// the output positions of the convolution with geometry g on inputs of spatial sizes `in`, grouped
/// by which taps fall into the padding (edge_groups), get y·gain[e] + bias[e]; interior positions
/// pass through. Parameters "gain" [E, K] (ones) and "bias" [E, K] (zeros), so the layer starts as
/// the identity. The group index is made once per device and input size.
class EdgeBias : public Module {
 public:
  /// E = edge_groups(g, in).count for the input sizes the layer is made for. ValueError when that
  /// geometry has no edge positions (valid padding).
  EdgeBias(const ConvGeometry& g, const std::vector<int64_t>& in, int64_t channels, DType dtype = DType::f32);

  /// ShapeError when y is not the output of the geometry for inputs `in`, or when those inputs
  /// give another number of edge groups than the layer has.
  Tensor forward(const Tensor& y, const std::vector<int64_t>& in) const;
  int64_t groups() const { return count_; }
  const ConvGeometry& geometry() const { return geometry_; }
  const Tensor& gain() const { return gain_; }
  const Tensor& bias() const { return bias_; }

 private:
  ConvGeometry geometry_;
  int64_t count_ = 0, channels_ = 0;
  Tensor gain_, bias_;
  mutable std::map<std::pair<std::vector<int64_t>, std::string>, Tensor> index_;  // (in, device) -> groups
};

}  // namespace nn
}  // namespace tessera
