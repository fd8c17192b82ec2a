#pragma once

#include "core/op.h"
#include "kernels/block_attention_packed/block_attention_packed.h"

namespace tessera {

namespace op {
/// Gradient of block_attention_packed: inputs g = dO [B·T, H·D], qkv [B·T, (H + 2·Hkv)·D], the
/// saved o [B·T, H·D] and lse [B, H, T], and, with dropout, optionally the Philox base; output
/// dqkv [B·T, (H + 2·Hkv)·D] with dq, dk, dv in the places of q, k, v (the math of
/// block_attention_backward). On CUDA the tensor-core kernels read and write the packed rows
/// directly; otherwise through [B, heads, T, D] temporaries. Not differentiable.
struct BlockAttentionPackedBackward : OpBase {
  static constexpr const char* kName = "block_attention_packed_backward";
  static constexpr bool kDifferentiable = false;
  static constexpr bool kRandom = true;  // with dropout > 0 (draws_random)
  using Attrs = op::BlockAttentionPacked::Attrs;
  static bool draws_random(const Attrs& a) { return a.dropout > 0; }
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
