#include "kernels/permute/permute.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/common/dispatch.h"

namespace tessera {

Tensor permute(const Tensor& x, const std::vector<int>& perm) { return call<op::Permute>({perm}, {x})[0]; }

std::vector<TensorMeta> op::Permute::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  check_num_inputs(kName, in, 1);
  const Shape& s = in[0].shape;
  const int nd = s.ndim();
  TS_CHECK(static_cast<int>(attrs.perm.size()) == nd, ShapeError,
           "permute: " << attrs.perm.size() << " dims given in the permutation of " << in[0]);
  std::vector<bool> seen(nd, false);
  std::vector<int64_t> dims(nd);
  for (int d = 0; d < nd; ++d) {
    const int p = attrs.perm[d];
    TS_CHECK(p >= -nd && p < nd && !seen[(p + nd) % nd], ValueError,
             "permute: entry " << p << " at position " << d << " is out of range or repeated for " << in[0]);
    seen[(p + nd) % nd] = true;
    dims[d] = s[(p + nd) % nd];
  }
  return {TensorMeta{Shape(dims), in[0].dtype, in[0].device}};
}

void op::Permute::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  const int nd = in[0].dim();
  std::vector<int> perm(nd);
  for (int d = 0; d < nd; ++d) perm[d] = (attrs.perm[d] + nd) % nd;
  cpu::permute_copy(in[0], out[0], perm);
}

std::vector<Tensor> op::Permute::backward(const BackwardContext& ctx, const Attrs& attrs) {
  const int nd = static_cast<int>(attrs.perm.size());
  std::vector<int> inverse(nd);
  for (int d = 0; d < nd; ++d) inverse[(attrs.perm[d] + nd) % nd] = d;
  return {permute(ctx.grad_output(), inverse)};
}

namespace cpu {
namespace {

// Source offset (elements) of the first element of output "row" r, where the output's merged
// dims [0, m) have sizes `size` and source strides `stride` (row = index over dims [0, m)).
inline int64_t source_offset(int64_t r, const std::vector<int64_t>& size, const std::vector<int64_t>& stride, int m) {
  int64_t off = 0;
  for (int d = m - 1; d >= 0; --d) {
    off += (r % size[d]) * stride[d];
    r /= size[d];
  }
  return off;
}

// Batched transpose: out[b, a, c] = x[src(b) + a + c * sc] for a < na, c < nc, in square
// tiles so both the reads (along a) and the writes (along c) stay in cache lines.
template <size_t ES>
void transpose_tiles(const char* x, char* y, const std::vector<int64_t>& size, const std::vector<int64_t>& stride) {
  constexpr int64_t kTile = 32;
  const int m = static_cast<int>(size.size());
  const int64_t na = size[m - 2], nc = size[m - 1], sc = stride[m - 1];
  int64_t batches = 1;
  for (int d = 0; d < m - 2; ++d) batches *= size[d];
  const int64_t ta = (na + kTile - 1) / kTile, tc = (nc + kTile - 1) / kTile;
#pragma omp parallel for if (batches * na * nc > kParallelGrain)
  for (int64_t task = 0; task < batches * ta * tc; ++task) {
    const int64_t b = task / (ta * tc), a0 = (task / tc) % ta * kTile, c0 = task % tc * kTile;
    const char* xb = x + source_offset(b, size, stride, m - 2) * ES;
    char* yb = y + b * na * nc * ES;
    const int64_t a1 = std::min(na, a0 + kTile), c1 = std::min(nc, c0 + kTile);
    for (int64_t a = a0; a < a1; ++a)
      for (int64_t c = c0; c < c1; ++c) std::memcpy(yb + (a * nc + c) * ES, xb + (a + c * sc) * ES, ES);
  }
}

// General case: each output row (last merged dim) gathers elements `stride.back()` apart.
template <size_t ES>
void gather_rows(const char* x, char* y, const std::vector<int64_t>& size, const std::vector<int64_t>& stride,
                 int64_t n) {
  const int m = static_cast<int>(size.size());
  const int64_t inner = size[m - 1], si = stride[m - 1];
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t r = 0; r < n / inner; ++r) {
    const char* xr = x + source_offset(r, size, stride, m - 1) * ES;
    char* yr = y + r * inner * ES;
    for (int64_t j = 0; j < inner; ++j) std::memcpy(yr + j * ES, xr + j * si * ES, ES);
  }
}

template <class F>
void dispatch_elem_size(size_t es, F&& f) {
  switch (es) {
    case 1: f(std::integral_constant<size_t, 1>{}); return;
    case 2: f(std::integral_constant<size_t, 2>{}); return;
    case 4: f(std::integral_constant<size_t, 4>{}); return;
    case 8: f(std::integral_constant<size_t, 8>{}); return;
    default: TS_THROW(DTypeError, "permute: unsupported element size " << es);
  }
}

}  // namespace

void permute_copy(const Tensor& in, const Tensor& out, const std::vector<int>& perm) {
  const int64_t n = in.numel();
  if (n == 0) return;
  const size_t es = dtype_size(in.dtype());
  const Shape& s = in.shape();
  const std::vector<int64_t> in_strides = s.strides();
  // Output dims in order as (size, source stride); size-1 dims dropped, and an output dim
  // merged into the previous one when the two are also adjacent (in order) in the source.
  std::vector<int64_t> size, stride;
  for (int p : perm) {
    const int64_t sz = s[p], st = in_strides[p];
    if (sz == 1) continue;
    if (!size.empty() && stride.back() == st * sz) {
      size.back() *= sz;
      stride.back() = st;
    } else {
      size.push_back(sz);
      stride.push_back(st);
    }
  }
  const char* x = static_cast<const char*>(in.data_ptr());
  char* y = static_cast<char*>(out.data_ptr());
  if (size.empty() || (size.size() == 1 && stride[0] == 1)) {
    std::memcpy(y, x, n * es);  // the order of elements does not change
    return;
  }
  const int m = static_cast<int>(size.size());
  if (stride[m - 1] == 1) {
    // Last dim kept (e.g. [B,T,H,D] -> [B,H,T,D]): copy contiguous rows of `inner` elements.
    const int64_t inner = size[m - 1], row_bytes = inner * static_cast<int64_t>(es);
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t r = 0; r < n / inner; ++r)
      std::memcpy(y + r * row_bytes, x + source_offset(r, size, stride, m - 1) * es, row_bytes);
    return;
  }
  dispatch_elem_size(es, [&](auto c) {
    constexpr size_t ES = decltype(c)::value;
    if (m >= 2 && stride[m - 2] == 1) {
      transpose_tiles<ES>(x, y, size, stride);
    } else {
      gather_rows<ES>(x, y, size, stride, n);
    }
  });
}

}  // namespace cpu
}  // namespace tessera
