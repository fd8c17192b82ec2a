// Position arithmetic of a convolution (conv_geometry.h) for the CPU and CUDA kernels of bsconv,
// bsconv_dx and bsconv_dw: a plain struct passed to kernels by value.
//
// Positions are flat indices within one sample, row-major over the spatial dimensions: input
// position i = (i0·in[1] + i1)·in[2] + i2 (unused dimensions have size 1), output positions
// likewise over out[], taps over kernel[].
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/common/conv_geometry.h"

#if defined(__CUDACC__)
#define TS_CONV_HD __host__ __device__ __forceinline__
#else
#define TS_CONV_HD inline
#endif

namespace tessera {

struct ConvIndex {
  int dims;
  int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad_lo[3];
  int64_t in_positions, out_positions, taps;

  /// The input position that output position p reads at tap t, or -1 where that is padding.
  TS_CONV_HD int64_t input_of(int64_t p, int64_t t) const {
    int64_t i = 0, scale = 1;
    for (int d = dims - 1; d >= 0; --d) {
      const int64_t o = p % out[d], k = t % kernel[d];
      p /= out[d];
      t /= kernel[d];
      const int64_t id = o * stride[d] - pad_lo[d] + k * dilation[d];
      if (id < 0 || id >= in[d]) return -1;
      i += id * scale;
      scale *= in[d];
    }
    return i;
  }

  /// Over a batch: the input row n·in_positions + i that output row n·out_positions + o reads at
  /// tap t, or -1 where that is padding.
  TS_CONV_HD int64_t input_row(int64_t row, int64_t t) const {
    const int64_t i = input_of(row % out_positions, t);
    return i < 0 ? -1 : (row / out_positions) * in_positions + i;
  }

  /// Over a batch: the output row whose tap t reads input row `row`, or -1 where none does.
  TS_CONV_HD int64_t output_row(int64_t row, int64_t t) const {
    const int64_t o = output_of(row % in_positions, t);
    return o < 0 ? -1 : (row / in_positions) * out_positions + o;
  }

  /// The output position whose tap t reads input position i, or -1 where none does.
  TS_CONV_HD int64_t output_of(int64_t i, int64_t t) const {
    int64_t p = 0, scale = 1;
    for (int d = dims - 1; d >= 0; --d) {
      const int64_t id = i % in[d], k = t % kernel[d];
      i /= in[d];
      t /= kernel[d];
      const int64_t num = id + pad_lo[d] - k * dilation[d];
      if (num < 0 || num % stride[d] != 0) return -1;
      const int64_t o = num / stride[d];
      if (o >= out[d]) return -1;
      p += o * scale;
      scale *= out[d];
    }
    return p;
  }
};

/// The rows that `rows` rows (over a batch) read at each tap, for the CPU kernels: table[t·rows + q]
/// = input_row(q, t) (from_output: q an output row, as bsconv and bsconv_dw read x) or
/// output_row(q, t) (q an input row, as bsconv_dx reads dy), -1 for padding. Made once per call
/// so that the gathers of every block look their rows up instead of recomputing them.
inline std::vector<int64_t> conv_row_table(const ConvIndex& ci, int64_t rows, bool from_output) {
  std::vector<int64_t> table(static_cast<size_t>(rows * ci.taps));
  for (int64_t t = 0; t < ci.taps; ++t)
    for (int64_t q = 0; q < rows; ++q)
      table[static_cast<size_t>(t * rows + q)] = from_output ? ci.input_row(q, t) : ci.output_row(q, t);
  return table;
}

/// The index arithmetic of geometry g for input spatial sizes `in` (and the output sizes they give).
inline ConvIndex conv_index(const ConvGeometry& g, const std::vector<int64_t>& in, const char* op) {
  const std::vector<int64_t> out = g.out_spatial(in, op);
  ConvIndex c{};
  c.dims = g.dims;
  c.in_positions = c.out_positions = c.taps = 1;
  for (int d = 0; d < 3; ++d) {
    const bool used = d < g.dims;
    c.in[d] = used ? in[d] : 1;
    c.out[d] = used ? out[d] : 1;
    c.kernel[d] = used ? g.kernel[d] : 1;
    c.stride[d] = used ? g.stride[d] : 1;
    c.dilation[d] = used ? g.dilation[d] : 1;
    c.pad_lo[d] = used ? g.pad_lo[d] : 0;
    c.in_positions *= c.in[d];
    c.out_positions *= c.out[d];
    c.taps *= c.kernel[d];
  }
  return c;
}

}  // namespace tessera
