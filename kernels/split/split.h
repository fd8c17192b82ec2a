#pragma once

#include "core/op.h"

namespace tessera {

/// Splits x along `dim` into pieces of the given sizes (which must add up to size(dim));
/// returns one new tensor per size (copies).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim = 0);
/// Splits x along `dim` into pieces of ceil(size / n) (the last one smaller), like
/// torch.chunk: this can make fewer than n pieces (size 5, n 4 -> 2, 2, 1). n >= 1.
/// An empty dim gives one empty piece.
std::vector<Tensor> chunk(const Tensor& x, int64_t n, int dim = 0);

namespace op {
/// out_k[o, j, i] = x[o, off_k + j, i] (x viewed as [outer, size(dim), inner]),
/// off_k = sizes[0] + ... + sizes[k-1]; one output per size.
/// Backward: concat(g_0, g_1, ..., dim), with zeros for outputs that received no gradient.
struct Split : OpBase {
  static constexpr const char* kName = "split";
  static constexpr bool kHalfNative = true;  // moves bytes, any dtype
  struct Attrs {
    std::vector<int64_t> sizes;
    int dim = 0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
