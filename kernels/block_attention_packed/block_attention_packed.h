// block_attention on the qkv projection's rows as they are: MultiHeadAttention's layout, without
// the copies that move the heads apart before attention and back after it.
//
//   Tensor qkv = qkv_proj.forward(x);                                // [B*T, (H + 2*Hkv) * D]
//   Tensor o = block_attention_packed(qkv, H, Hkv, layout);          // [B*T, H * D]
//   Tensor y = proj.forward(o);
#pragma once

#include "core/op.h"
#include "core/random.h"
#include "core/sparse/attention_layout.h"

namespace tessera {

/// o = block_attention(q, k, v, layout, scale, dropout, gen) with q, k, v read from packed rows:
/// row b·T + t of qkv [B·T, (H + 2·Hkv)·D] holds token t of sequence b as H query heads, then
/// Hkv key heads, then Hkv value heads, D values each; row b·T + t of o [B·T, H·D] holds its H
/// output heads. T is the layout's, H its heads; H a multiple of Hkv (grouped-query attention).
/// The same values, masks and Philox stream use as block_attention on the unpacked tensors.
Tensor block_attention_packed(const Tensor& qkv, int64_t heads, int64_t kv_heads, const AttentionLayoutPtr& layout,
                              double scale = 0, double dropout = 0, Generator& gen = default_generator());

namespace op {
/// Inputs qkv [B·T, (H + 2·Hkv)·D] (floating) and, with dropout, optionally the Philox base (as
/// BlockAttention). Outputs o [B·T, H·D] (qkv's dtype) and lse [B, H, T] (f64 for f64, else f32).
/// On CUDA the tensor-core kernels read and write the packed rows directly (bf16/f16, the cases
/// of flash_sm80.h); other cases and the CPU unpack into [B, heads, T, D] temporaries and run
/// block_attention's kernels. Backward: block_attention_packed_backward.
struct BlockAttentionPacked : OpBase {
  static constexpr const char* kName = "block_attention_packed";
  static constexpr unsigned kSaveInputs = 0b11;  // qkv, the Philox base (when given)
  static constexpr unsigned kSaveOutputs = 0b11;  // o, lse
  static constexpr bool kRandom = true;           // with dropout > 0 (draws_random)
  struct Attrs {
    AttentionLayoutPtr layout;
    int64_t heads = 0, kv_heads = 0;  ///< H, Hkv
    double scale = 0;                 ///< 0 = 1/sqrt(D)
    double dropout = 0;
    uint64_t seed = 0, start = 0;
  };
  static bool draws_random(const Attrs& a) { return a.dropout > 0; }
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static std::vector<Tensor> backward(const BackwardContext& ctx, const Attrs&);
};
}  // namespace op

namespace detail {
/// Sizes of a packed qkv for op `op`: {B, T, D}; ShapeError/ValueError naming what is wrong.
std::vector<int64_t> packed_attention_sizes(const char* op, const TensorMeta& qkv, const AttentionLayoutPtr& layout,
                                            int64_t heads, int64_t kv_heads);
}  // namespace detail

}  // namespace tessera
