#pragma once

#include <cstdint>
#include <limits>
#include <utility>

#include "core/op.h"

namespace tessera {

/// Elements [start, end) of x along `dim` (any dtype), other dims whole. Python rules: a
/// negative start/end counts from the end of the dim, and out-of-range bounds are clamped
/// to [0, size] (never an error; end <= start gives an empty dim). The default end is "to the end".
/// When the result is contiguous inside x (every dim before `dim` has size 1, e.g. slicing
/// dim 0, or the slice is the whole dim) it is a view sharing x's storage; otherwise a copy.
Tensor slice(const Tensor& x, int dim, int64_t start, int64_t end = std::numeric_limits<int64_t>::max());

namespace op {
/// out[o, j, i] = x[o, b + j, i] for j < e - b (x viewed as [outer, size(dim), inner]), where
/// [b, e) are start/end normalized and clamped as above.
/// Backward: slice_backward(g, x's shape, dim, b): zeros of x's shape with g at [b, e).
struct Slice : OpBase {
  static constexpr const char* kName = "slice";
  static constexpr bool kHalfNative = true;  // moves bytes, any dtype
  static constexpr bool kView = true;        // when contiguous; see view_offset
  struct Attrs {
    int dim = 0;
    int64_t start = 0;
    int64_t end = std::numeric_limits<int64_t>::max();
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  /// Byte offset of the slice in x when it is contiguous there, else nullopt (then cpu() copies).
  static std::optional<size_t> view_offset(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

namespace detail {
/// [start, end) of a dim of `size` after Python-style normalization and clamping; b <= e.
std::pair<int64_t, int64_t> slice_bounds(int64_t size, int64_t start, int64_t end);
}  // namespace detail

}  // namespace tessera
