#pragma once

#include "core/op.h"

namespace tessera {

/// Same data, new shape (a view: no copy). One size may be -1 and is inferred.
Tensor reshape(const Tensor& x, const std::vector<int64_t>& shape);
inline Tensor reshape(const Tensor& x, const Shape& shape) { return reshape(x, shape.vec()); }
inline Tensor reshape(const Tensor& x, std::initializer_list<int64_t> shape) {
  return reshape(x, std::vector<int64_t>(shape));
}
/// Alias of reshape (all tensors are contiguous, so every reshape is a view).
inline Tensor view(const Tensor& x, const std::vector<int64_t>& shape) { return reshape(x, shape); }
inline Tensor view(const Tensor& x, std::initializer_list<int64_t> shape) { return reshape(x, shape); }
/// Collapses dims [start, end] into one.
Tensor flatten(const Tensor& x, int start = 0, int end = -1);

namespace op {
struct Reshape : OpBase {
  static constexpr const char* kName = "reshape";
  static constexpr bool kView = true;
  static constexpr bool kHalfNative = true;
  struct Attrs {
    std::vector<int64_t> shape;  ///< may hold one -1
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static std::optional<size_t> view_offset(const std::vector<TensorMeta>&, const Attrs&) { return 0; }
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
