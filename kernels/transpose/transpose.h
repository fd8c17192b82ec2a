#pragma once

#include "core/op.h"

namespace tessera {

/// Swaps the last two dims of x (rank >= 2, any dtype): [..., M, N] -> [..., N, M], copied.
Tensor transpose(const Tensor& x);

namespace op {
/// out[..., j, i] = x[..., i, j]. Backward: transpose(g).
struct Transpose : OpBase {
  static constexpr const char* kName = "transpose";
  static constexpr bool kHalfNative = true;  // moves bytes, any dtype
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
