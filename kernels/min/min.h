#pragma once

#include "core/op.h"

namespace tessera {

/// Smallest element of x (a 0-d tensor); ShapeError when x is empty.
Tensor min(const Tensor& x);
/// Smallest value along `dim`; keepdim keeps it with size 1. Gradient: the whole of g goes to
/// the first position of the minimum (ties: lowest index). NaN counts as smaller than any number.
Tensor min(const Tensor& x, int dim, bool keepdim = false);
/// Index (i32) of the first minimum along `dim`; not differentiable.
Tensor argmin(const Tensor& x, int dim, bool keepdim = false);

namespace op {
/// With x viewed as [outer, n = size(dim), inner]:
///   values[o, i] = min_k x[o, k, i],  indices[o, i] = first k attaining it (i32).
/// Outputs and shapes as for max. Backward: max_backward(g, indices, x's shape, dim), the same
/// scatter of g to the selected positions.
struct Min : OpBase {
  static constexpr const char* kName = "min";
  static constexpr unsigned kSaveOutputs = 0b10;  // indices
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
