#pragma once

#include "core/op.h"

namespace tessera {

/// C = op(A)·op(B), op = transpose when the flag is set.
/// 2-D: A [M,K] (or [K,M] with trans_a), B [K,N] (or [N,K]) -> C [M,N].
/// 3-D batched: the same per leading index, A [B,..], B [B,..] -> C [B,M,N].
/// Under autocast (core/autocast.h) f32 operands are multiplied in bf16/f16 with f32 sums and
/// C comes back f32.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

/// Backward, with G = dC:
///   dA = G·op(B)ᵀ (trans_a: op(B)·Gᵀ),   dB = op(A)ᵀ·G (trans_b: Gᵀ·op(A)),
/// each itself one matmul with transpose flags, so no transposed copies are made.
/// f32_output: A and B bf16/f16, C f32 (the products are summed in f32 either way; this skips
/// the rounding of C). Its backward casts G to the inputs' dtype once and gives dA, dB in it.
/// Under autocast B, when it is the bf16/f16 cast of an f32 tensor (a master weight), gets its
/// gradient as the GEMM's f32 sums (BackwardContext::input_grad_may_be_f32: no rounding to the
/// half dtype and no cast back); A's gradient stays in A's dtype.
/// op(a)·op(b) as the gradient of input `input` of a backward: with f32 output when a is
/// bf16/f16 and that input may take an f32 gradient (Linear's and Matmul's backward).
Tensor matmul_grad(const BackwardContext& ctx, int input, const Tensor& a, const Tensor& b, bool trans_a,
                   bool trans_b);

namespace op {
struct Matmul : OpBase {
  static constexpr const char* kName = "matmul";
  static constexpr unsigned kSaveInputs = 0b11;
  struct Attrs {
    bool trans_a = false;
    bool trans_b = false;
    bool f32_output = false;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

}  // namespace tessera
