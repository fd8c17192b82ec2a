#pragma once

#include "core/op.h"

namespace tessera {

/// Largest element of x (a 0-d tensor); ShapeError when x is empty.
Tensor max(const Tensor& x);
/// Largest value along `dim` (negative counts from the end); keepdim keeps it with size 1.
/// Gradient: the whole of g goes to the first position of the maximum along dim (ties: the
/// lowest index wins, the other tied positions get 0). NaN counts as larger than any number.
Tensor max(const Tensor& x, int dim, bool keepdim = false);
/// Index (i32) of the first maximum along `dim`; not differentiable.
Tensor argmax(const Tensor& x, int dim, bool keepdim = false);
/// Flat index (i32, 0-d) of the first maximum of all elements.
Tensor argmax(const Tensor& x);

namespace op {
/// With x viewed as [outer, n = size(dim), inner]:
///   values[o, i] = max_k x[o, k, i],  indices[o, i] = first k attaining it (i32).
/// Outputs: values (x's dtype) and indices (i32), both shaped like x without dim (or with
/// dim of size 1 when keepdim).
/// Backward: dx = max_backward(g, indices, x's shape, dim): zeros with g at [o, indices[o, i], i].
struct Max : OpBase {
  static constexpr const char* kName = "max";
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

namespace detail {
/// Shape rule shared by max and min: values (x's dtype) and i32 indices of x reduced over dim.
std::vector<TensorMeta> infer_extreme(const char* op, const std::vector<TensorMeta>& in, int dim, bool keepdim);
}  // namespace detail

namespace cpu {
/// values/indices of the max (take_min = false) or min along dim; first index wins ties,
/// NaN wins over numbers (the first NaN is taken).
void extreme_along_dim(const Tensor& x, const Tensor& values, const Tensor& indices, int dim, bool take_min);
}  // namespace cpu

namespace cuda {
/// The same on the GPU, on the tensors' stream (kernels/max/max.cu; CUDA builds only).
void extreme_along_dim(const Tensor& x, const Tensor& values, const Tensor& indices, int dim, bool take_min);
}  // namespace cuda

}  // namespace tessera
