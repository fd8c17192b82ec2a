#pragma once

#include "core/autocast.h"
#include "core/op.h"

namespace tessera {

/// x converted to `dtype` (any dtype to any dtype; a copy even when the dtype is the same).
/// Float -> integer truncates toward zero; to bf16/f16 rounds to nearest even.
Tensor cast(const Tensor& x, DType dtype);

namespace autocast {
/// `t` as the operand of an autocast op (matmul, linear, bsmm, block attention): t itself unless
/// autocast is on (core/autocast.h) and t is f32; then cast(t, dtype()), made once per outermost
/// guard for parameters (leaves that require grad) and reused.
Tensor operand(const Tensor& t);
}  // namespace autocast

namespace op {
/// y = x converted element by element (any shape). Backward: dx = cast(g, x's dtype) when x
/// is floating; integer inputs get no gradient (and integer outputs carry none).
struct Cast : OpBase {
  static constexpr const char* kName = "cast";
  static constexpr bool kHalfNative = true;  // converts bf16/f16 bits itself
  struct Attrs {
    DType dtype = DType::f32;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
