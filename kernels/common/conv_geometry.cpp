#include "kernels/common/conv_geometry.h"

#include <map>
#include <sstream>

#include "core/error.h"

namespace tessera {

ConvPadding parse_conv_padding(const std::string& s) {
  if (s == "valid") return ConvPadding::valid;
  if (s == "same") return ConvPadding::same;
  if (s == "causal") return ConvPadding::causal;
  TS_THROW(ValueError, "convolution padding '" << s << "': expected valid, same or causal");
}

const char* conv_padding_name(ConvPadding p) {
  switch (p) {
    case ConvPadding::valid: return "valid";
    case ConvPadding::same: return "same";
    case ConvPadding::causal: return "causal";
    case ConvPadding::explicit_pads: return "explicit";
  }
  return "?";
}

int64_t ConvGeometry::taps() const {
  int64_t t = 1;
  for (int d = 0; d < dims; ++d) t *= kernel[d];
  return t;
}

int64_t ConvGeometry::out_size(int d, int64_t in) const {
  const int64_t span = dilation[d] * (kernel[d] - 1) + 1, padded = in + pad_lo[d] + pad_hi[d];
  if (padded < span) return 0;
  return (padded - span) / stride[d] + 1;
}

std::vector<int64_t> ConvGeometry::spatial_of(const Shape& x, const char* op, const char* what) const {
  TS_CHECK(x.ndim() == dims + 2, ShapeError,
           op << ": " << what << " " << x << " must be [N, " << (dims == 1 ? "T" : dims == 2 ? "H, W" : "D, H, W")
              << ", channels] for a " << dims << "-D convolution");
  std::vector<int64_t> s(dims);
  for (int d = 0; d < dims; ++d) s[d] = x[d + 1];
  return s;
}

std::vector<int64_t> ConvGeometry::out_spatial(const std::vector<int64_t>& in, const char* op) const {
  std::vector<int64_t> out(dims);
  for (int d = 0; d < dims; ++d) {
    out[d] = out_size(d, in[d]);
    TS_CHECK(in[d] >= 1 && out[d] >= 1, ShapeError,
             op << ": input size " << in[d] << " of spatial dimension " << d << " is too small for " << str());
  }
  return out;
}

Shape ConvGeometry::output_shape(const Shape& x, int64_t channels, const char* op) const {
  const std::vector<int64_t> out = out_spatial(spatial_of(x, op, "x"), op);
  std::vector<int64_t> dims_out{x[0]};
  dims_out.insert(dims_out.end(), out.begin(), out.end());
  dims_out.push_back(channels);
  return Shape(dims_out);
}

std::vector<int64_t> ConvGeometry::kernel_shape() const { return std::vector<int64_t>(kernel.begin(), kernel.begin() + dims); }

std::string ConvGeometry::str() const {
  std::ostringstream s;
  auto list = [&](const char* name, const std::array<int64_t, kMaxDims>& v) {
    s << name << " ";
    for (int d = 0; d < dims; ++d) s << (d ? "x" : "") << v[d];
  };
  list("kernel", kernel);
  s << ", ";
  list("stride", stride);
  s << ", ";
  list("dilation", dilation);
  s << ", pads ";
  for (int d = 0; d < dims; ++d) s << (d ? " " : "") << pad_lo[d] << "/" << pad_hi[d];
  return s.str();
}

namespace {

// One value per dimension from `v` (empty: `fallback`; one value: broadcast), each ≥ `least`.
std::array<int64_t, ConvGeometry::kMaxDims> per_dim(const std::vector<int64_t>& v, int dims, int64_t fallback,
                                                     int64_t least, const char* what) {
  TS_CHECK(v.empty() || v.size() == 1 || static_cast<int>(v.size()) == dims, ValueError,
           "convolution " << what << ": " << v.size() << " values for a " << dims
                          << "-D filter (give one, or one per dimension)");
  std::array<int64_t, ConvGeometry::kMaxDims> out{fallback, fallback, fallback};
  for (int d = 0; d < dims; ++d) {
    out[d] = v.empty() ? fallback : v.size() == 1 ? v[0] : v[d];
    TS_CHECK(out[d] >= least, ValueError, "convolution " << what << " " << out[d] << " must be at least " << least);
  }
  for (int d = dims; d < ConvGeometry::kMaxDims; ++d) out[d] = least == 0 ? 0 : 1;
  return out;
}

}  // namespace

ConvGeometry conv_geometry(const std::vector<int64_t>& in, const std::vector<int64_t>& kernel,
                           const std::vector<int64_t>& stride, const std::vector<int64_t>& dilation,
                           ConvPadding padding, const std::vector<int64_t>& pad_lo,
                           const std::vector<int64_t>& pad_hi) {
  const int dims = static_cast<int>(kernel.size());
  TS_CHECK(dims >= 1 && dims <= ConvGeometry::kMaxDims, ValueError,
           "convolution: a filter of " << dims << " spatial dimensions (1, 2 or 3)");
  ConvGeometry g;
  g.dims = dims;
  g.kernel = per_dim(kernel, dims, 1, 1, "kernel size");
  g.stride = per_dim(stride, dims, 1, 1, "stride");
  g.dilation = per_dim(dilation, dims, 1, 1, "dilation");
  g.pad_lo = per_dim({}, dims, 0, 0, "padding");
  g.pad_hi = g.pad_lo;
  const bool needs_in = padding == ConvPadding::same || padding == ConvPadding::causal;
  TS_CHECK(!needs_in || static_cast<int>(in.size()) == dims, ValueError,
           "convolution: " << conv_padding_name(padding) << " padding needs the input's " << dims
                           << " spatial sizes, got " << in.size());
  TS_CHECK(padding != ConvPadding::causal || dims == 1, ValueError,
           "convolution: causal padding is for 1-D convolutions, not " << dims << "-D");
  for (int d = 0; d < dims; ++d) {
    const int64_t span = g.dilation[d] * (g.kernel[d] - 1);
    switch (padding) {
      case ConvPadding::valid: break;
      case ConvPadding::same: {
        const int64_t out = (in[d] + g.stride[d] - 1) / g.stride[d];
        const int64_t total = std::max<int64_t>((out - 1) * g.stride[d] + span + 1 - in[d], 0);
        g.pad_lo[d] = total / 2;
        g.pad_hi[d] = total - total / 2;
        break;
      }
      case ConvPadding::causal: g.pad_lo[d] = span; break;
      case ConvPadding::explicit_pads: break;
    }
  }
  if (padding == ConvPadding::explicit_pads) {
    g.pad_lo = per_dim(pad_lo, dims, 0, 0, "padding");
    g.pad_hi = per_dim(pad_hi, dims, 0, 0, "padding");
  }
  return g;
}

EdgeGroups edge_groups(const ConvGeometry& g, const std::vector<int64_t>& in) {
  const std::vector<int64_t> out = g.out_spatial(in, "edge_groups");
  int64_t positions = 1;
  for (int64_t o : out) positions *= o;
  EdgeGroups e;
  e.group.assign(static_cast<size_t>(positions), -1);
  std::map<std::vector<int64_t>, int32_t> ids;  // (lo, hi) per dimension -> group
  std::vector<int64_t> key(2 * g.dims);
  for (int64_t p = 0; p < positions; ++p) {
    int64_t rest = p;
    bool edge = false;
    for (int d = g.dims - 1; d >= 0; --d) {
      const int64_t o = rest % out[d];
      rest /= out[d];
      const int64_t first = o * g.stride[d] - g.pad_lo[d];  // input position of tap 0
      int64_t lo = 0, hi = 0;
      for (int64_t t = 0; t < g.kernel[d]; ++t) {
        const int64_t i = first + t * g.dilation[d];
        lo += i < 0;
        hi += i >= in[d];
      }
      key[2 * d] = lo;
      key[2 * d + 1] = hi;
      edge = edge || lo > 0 || hi > 0;
    }
    if (!edge) continue;
    auto it = ids.find(key);
    if (it == ids.end()) it = ids.emplace(key, static_cast<int32_t>(ids.size())).first;
    e.group[static_cast<size_t>(p)] = it->second;
  }
  e.count = static_cast<int64_t>(ids.size());
  return e;
}

Tensor edge_group_index(const ConvGeometry& g, const std::vector<int64_t>& in) {
  EdgeGroups e = edge_groups(g, in);
  const int64_t n = static_cast<int64_t>(e.group.size());
  return from_vector<int32_t>(e.group, Shape({n}));
}

}  // namespace tessera
