#pragma once

#include "core/op.h"

namespace tessera {

/// a + b with numpy broadcasting.
Tensor add(const Tensor& a, const Tensor& b);

namespace op {
/// out = a + b (broadcast); backward: da = sum_to(g, a), db = sum_to(g, b).
struct Add : OpBase {
  static constexpr const char* kName = "add";
  static constexpr bool kInPlace = true;
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
