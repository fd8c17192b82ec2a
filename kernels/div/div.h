#pragma once

#include "core/op.h"

namespace tessera {

/// a / b with numpy broadcasting.
Tensor div(const Tensor& a, const Tensor& b);

namespace op {
/// out = a / b; backward: da = sum_to(g / b), db = -sum_to(g·a / b²).
struct Div : OpBase {
  static constexpr const char* kName = "div";
  static constexpr bool kInPlace = true;
  static constexpr unsigned kSaveInputs = 0b11;
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
