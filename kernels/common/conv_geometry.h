// The geometry of a convolution over 1, 2 or 3 spatial dimensions, channels last (DESIGN.md:
// activations [N, …spatial, C]), and the edge groups of its output positions. Shared by the
// block-sparse convolution ops (bsconv, bsconv_dx, bsconv_dw), edge_bias and their layers.
//
//   ConvGeometry g = conv_geometry({T}, {3}, {1}, {4}, ConvPadding::causal);   // 1-D, dilation 4
//   Shape y = g.output_shape(x.shape(), K);                                    // [N, T, K]
//   Tensor groups = edge_group_index(g, {T});                                  // i32 [T], -1 inside
//
// Output position o (per dimension d) reads input positions o·stride[d] − pad_lo[d] + t·dilation[d]
// for taps t = 0 … kernel[d] − 1; positions outside [0, in[d]) read zeros (the padding):
//   out[d] = ⌊(in[d] + pad_lo[d] + pad_hi[d] − dilation[d]·(kernel[d] − 1) − 1) / stride[d]⌋ + 1.
// Taps are numbered row-major over the dimensions (tap = (t0·kernel[1] + t1)·kernel[2] + t2), the
// order of a filter's [kernel…] axes.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/shape.h"
#include "core/tensor.h"

namespace tessera {

/// How the padding of each spatial dimension is chosen from the input size:
///   valid:    none;
///   same:     out = ⌈in / stride⌉, the total padding max((out − 1)·stride + dilation·(k − 1) + 1 − in, 0)
///             split with the smaller half first (pad_lo = total / 2);
///   causal:   1-D only, pad_lo = dilation·(k − 1), pad_hi = 0 (output t sees inputs ≤ t·stride);
///   explicit: the pad_lo / pad_hi given.
enum class ConvPadding { valid, same, causal, explicit_pads };

/// Parses "valid", "same", "causal" (ValueError naming the text otherwise); and back.
ConvPadding parse_conv_padding(const std::string& s);
const char* conv_padding_name(ConvPadding p);

struct ConvGeometry {
  static constexpr int kMaxDims = 3;
  int dims = 0;  ///< spatial dimensions: 1, 2 or 3
  std::array<int64_t, kMaxDims> kernel{1, 1, 1}, stride{1, 1, 1}, dilation{1, 1, 1}, pad_lo{0, 0, 0},
      pad_hi{0, 0, 0};

  /// Taps of a filter: the product of kernel over the dimensions.
  int64_t taps() const;
  /// The output size of dimension d for an input of size `in` (≤ 0 when the filter does not fit).
  int64_t out_size(int d, int64_t in) const;
  /// The spatial sizes of x [N, …spatial, C] (ShapeError unless x has dims + 2 axes).
  std::vector<int64_t> spatial_of(const Shape& x, const char* op, const char* what) const;
  /// Output spatial sizes for input spatial sizes `in` (ShapeError when one is < 1).
  std::vector<int64_t> out_spatial(const std::vector<int64_t>& in, const char* op) const;
  /// [N, out…, channels] for x [N, in…, C].
  Shape output_shape(const Shape& x, int64_t channels, const char* op) const;
  /// [kernel…]: the filter's spatial axes.
  std::vector<int64_t> kernel_shape() const;
  std::string str() const;
  bool operator==(const ConvGeometry& o) const {
    return dims == o.dims && kernel == o.kernel && stride == o.stride && dilation == o.dilation &&
           pad_lo == o.pad_lo && pad_hi == o.pad_hi;
  }
  bool operator!=(const ConvGeometry& o) const { return !(*this == o); }
};

/// The geometry of a filter `kernel` (one size per spatial dimension: 1-3 of them) with `stride`
/// and `dilation` (empty: 1 in every dimension; one value: the same in every dimension), padded by
/// `padding` for inputs of spatial size `in` (same and causal depend on it; valid and explicit do
/// not, and `in` may then be empty). `pad_lo` / `pad_hi` are read for explicit padding only (one
/// value or one per dimension). ValueError / ShapeError with one line naming the bad argument.
ConvGeometry conv_geometry(const std::vector<int64_t>& in, const std::vector<int64_t>& kernel,
                           const std::vector<int64_t>& stride, const std::vector<int64_t>& dilation,
                           ConvPadding padding, const std::vector<int64_t>& pad_lo = {},
                           const std::vector<int64_t>& pad_hi = {});

/// Edge groups: output positions grouped by which filter taps fall outside the input. Per
/// dimension a position's taps outside are a prefix (below 0: `lo` taps) and a suffix (at or past
/// in: `hi` taps); positions with the same (lo, hi) in every dimension, not all zero, form one
/// group, numbered in the order of their first position (row-major over the output). Interior
/// positions (no tap outside) are in no group: -1.
struct EdgeGroups {
  std::vector<int32_t> group;  ///< [prod(out)]: the group of each output position, or -1
  int64_t count = 0;           ///< E, the number of groups
};
EdgeGroups edge_groups(const ConvGeometry& g, const std::vector<int64_t>& in);

/// edge_groups(g, in).group as an i32 tensor [prod(out)] on the CPU (what edge_bias takes).
Tensor edge_group_index(const ConvGeometry& g, const std::vector<int64_t>& in);

}  // namespace tessera
