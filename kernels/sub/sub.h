#pragma once

#include "core/op.h"

namespace tessera {

/// a - b with numpy broadcasting.
Tensor sub(const Tensor& a, const Tensor& b);

namespace op {
/// out = a - b; backward: da = sum_to(g), db = -sum_to(g).
struct Sub : OpBase {
  static constexpr const char* kName = "sub";
  static constexpr bool kInPlace = true;
  static constexpr unsigned kSaveInputs = 0;
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
