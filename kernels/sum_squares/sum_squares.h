#pragma once

#include <vector>

#include "core/op.h"

namespace tessera {

/// Σ over the tensors Σ over their elements of x², as a 0-d f64 tensor: the squared global norm
/// of a list of gradients in one op (optim::global_grad_norm). `xs`: one or more tensors of one
/// floating dtype on one device, any shapes (empty ones add 0).
Tensor sum_squares(const std::vector<Tensor>& xs);

namespace op {
/// Inputs x_0 .. x_{N-1} (N >= 1, one floating dtype T, any shapes) -> output [] f64:
///   out = Σ_k Σ_i round_T(x_k[i] · x_k[i])
/// Each square is rounded to T exactly as mul(x, x) stores it (bf16/f16: the product of the
/// f32 values, rounded once to T), then widened and accumulated in f64 in a fixed order, so a
/// run on the same inputs gives the same bits. The CPU kernel sums each tensor in chunks of a
/// fixed size (in parallel) and adds the chunk sums in order; the CUDA kernel is one multi-tensor
/// launch per 48 tensors writing per-block f64 partials, then one block summing them in order.
/// Not differentiable.
struct SumSquares : OpBase {
  static constexpr const char* kName = "sum_squares";
  static constexpr bool kDifferentiable = false;
  static constexpr bool kHalfNative = true;  // rounds bf16/f16 squares itself
  struct Attrs {};
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
