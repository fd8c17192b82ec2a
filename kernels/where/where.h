#pragma once

#include "core/op.h"

namespace tessera {

/// a where cond is nonzero, else b; cond (u8), a and b broadcast together (numpy rules).
///   Tensor y = where(gt(x, 0.0), x, mul(x, 0.01));   // leaky relu
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

namespace op {
/// out[i] = cond[i] ? a[i] : b[i] over the broadcast shape of (cond, a, b); cond is u8, a and b
/// share any numeric dtype, which out takes. Backward (reads the saved cond only):
///   da = sum_to(g with zeros where !cond, a's shape) = sum_to(masked_fill(g, cond == 0, 0))
///   db = sum_to(g with zeros where  cond, b's shape) = sum_to(masked_fill(g, cond, 0))
/// cond gets no gradient.
struct Where : OpBase {
  static constexpr const char* kName = "where";
  static constexpr unsigned kSaveInputs = 0b001;
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
