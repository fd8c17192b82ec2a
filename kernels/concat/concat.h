#pragma once

#include "core/op.h"

namespace tessera {

/// Joins tensors along `dim` (negative counts from the end). All have the same dtype, device
/// and rank (>= 1) and equal sizes outside `dim`: [.., a_k, ..] -> [.., sum_k a_k, ..].
Tensor concat(const std::vector<Tensor>& xs, int dim = 0);

namespace op {
/// out[o, off_k + j, i] = x_k[o, j, i] (each input viewed as [outer, a_k, inner]),
/// off_k = a_0 + ... + a_{k-1}. Backward: split(g, {a_0, a_1, ...}, dim).
struct Concat : OpBase {
  static constexpr const char* kName = "concat";
  static constexpr bool kHalfNative = true;  // moves bytes, any dtype
  struct Attrs {
    int dim = 0;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
