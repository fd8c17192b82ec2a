// Automatic mixed precision ("autocast"): while an autocast::Guard for bf16 or f16 is alive on
// a thread, the compute-heavy ops — matmul, bsmm and block_attention — take f32 inputs in the
// low precision: their f32 operands are cast to bf16/f16, the products are summed in f32 and
// the result comes back as f32. Operands already in the low dtype are taken as they are (an
// attention layer casts q, k, v once and keeps its scores and probabilities in bf16). Everything else (layer norm, softmax, losses, optimizer
// updates) and the parameters stay f32: the parameters are the f32 master weights, cast on use.
//
//   {
//     autocast::Guard amp(DType::bf16);
//     Tensor loss = model.loss(x, y);          // matmuls in bf16 with f32 accumulation
//   }
//   loss.backward();                           // grads f32, like the parameters
//
// Backward rules run with autocast off (run_backward switches it off): each op's gradient is
// computed in the dtypes its forward used. Within the outermost guard, the cast of a parameter
// (a leaf that requires grad) is made once and reused — an LSTM's recurrent weight is cast once
// per sequence, not once per step. The cache goes when the outermost guard does.
#pragma once

#include "core/tensor.h"

namespace tessera {
namespace autocast {

/// The low-precision dtype in force on this thread: bf16 or f16, or f32 when autocast is off.
DType dtype();
inline bool enabled() { return dtype() != DType::f32; }

/// Sets the autocast dtype for its lifetime: bf16 or f16 on, f32 off (ValueError otherwise).
/// Guards nest; the previous state comes back on destruction.
class Guard {
 public:
  explicit Guard(DType dtype);
  ~Guard();
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  DType prev_;
};

/// `t` as the operand of an autocast op: t itself unless autocast is on and t is f32; then
/// cast(t, dtype()), cached for parameters (see the file comment).
Tensor operand(const Tensor& t);

/// The dtype operand(x) has: dtype() when autocast is on and x is f32, else x's. A producer whose
/// one consumer is an autocast product can write its output in it directly (no cast).
DType operand_dtype(const Tensor& x);

/// Whether an autocast op with these inputs casts them: autocast is on, every defined input is
/// f32 or already in the autocast dtype, and at least one is f32 (the result is then f32). Inputs
/// all in the autocast dtype give a result in it, as without autocast; other dtypes (f64) are
/// left alone.
bool applies(std::initializer_list<const Tensor*> inputs);

}  // namespace autocast
}  // namespace tessera
