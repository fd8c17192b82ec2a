#pragma once

#include "core/op.h"

namespace tessera {

/// Natural logarithm, elementwise (NaN below 0, -inf at 0).
Tensor log(const Tensor& x);

namespace op {
/// y = ln x (any shape, floating); backward: dx = g / x (reads the saved input).
struct Log : OpBase {
  static constexpr const char* kName = "log";
  static constexpr bool kInPlace = true;
  static constexpr unsigned kSaveInputs = 0b1;
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
