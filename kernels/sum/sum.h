#pragma once

#include "core/op.h"

namespace tessera {

/// Sum of all elements (a 0-d tensor).
Tensor sum(const Tensor& x);
/// Sum over `dim` (negative counts from the end); keepdim keeps it with size 1.
Tensor sum(const Tensor& x, int dim, bool keepdim = false);
/// Mean of all elements / over `dim` (sum scaled by 1/n).
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, int dim, bool keepdim = false);

namespace op {
/// out[o, i] = sum_k x[o, k, i] with x viewed as [outer, size(dim), inner].
/// Backward: g (with dim restored as size 1) expanded back to x's shape.
struct Sum : OpBase {
  static constexpr const char* kName = "sum";
  struct Attrs {
    int dim = 0;
    bool keepdim = false;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
