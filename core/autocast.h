// Automatic mixed precision ("autocast"), its mode: while an autocast::Guard for bf16 or f16 is
// alive on a thread, the compute-heavy ops — matmul, bsmm and block_attention — take f32 inputs
// in low precision: their f32 operands are cast to bf16/f16, the products summed in f32, the
// result is f32. Operands already in the low dtype are taken as they are (an attention layer
// casts q, k, v once, keeps its scores and probabilities in bf16; a product whose one reader
// takes the low dtype can write it instead, from its f32 sums: linear's and bsmm's `out`). All
// else (layer norm, softmax, losses, optimizer updates) and the parameters (f32 master weights,
// cast on use) stay f32.
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
//
// Layering: this is the mode (like grad mode, part of core's base, which runs no op). The cast
// itself, autocast::operand(x), is the cast op's (kernels/cast/cast.h); the autocast ops call it.
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

/// The dtype operand(x) has: dtype() when autocast is on and x is f32, else x's. A producer whose
/// one consumer is an autocast product can write its output in it directly (no cast).
DType operand_dtype(const Tensor& x);

/// Whether an autocast op with these inputs casts them: autocast is on, every defined input is
/// f32 or already in the autocast dtype, and at least one is f32 (the result is then f32). Inputs
/// all in the autocast dtype give a result in it, as without autocast; other dtypes (f64) are
/// left alone.
bool applies(std::initializer_list<const Tensor*> inputs);

namespace detail {
/// The cache of parameter casts that autocast::operand (kernels/cast/cast.h) keeps inside the
/// outermost guard: the cast of `param` to dtype() made before, or nullptr.
const Tensor* cached_cast(const Tensor& param);
/// Remembers `cast` as the cast of `param` until the outermost guard ends.
void cache_cast(const Tensor& param, const Tensor& cast);
}  // namespace detail

}  // namespace autocast
}  // namespace tessera
