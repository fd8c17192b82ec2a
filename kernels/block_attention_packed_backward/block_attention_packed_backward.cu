// block_attention_packed_backward on the GPU: Δ = rowsum(dO ⊙ O) from the packed rows
// (attention_row_dot.cuh), then the
// tensor-core backward (flash_sm80_backward.h) reading q, k, v from qkv and dO from g in place
// and writing dq, dk, dv into their columns of dqkv; cases it does not take unpack into
// [B, heads, T, D] temporaries, run block_attention_backward's kernels and pack the gradients.
#include <type_traits>

#include "core/cuda/check.cuh"
#include "kernels/block_attention/attention_dropout.h"
#include "kernels/block_attention/block_attention.h"
#include "kernels/block_attention_backward/block_attention_backward.h"
#include "kernels/block_attention_backward/flash_sm80_backward.h"
#include "kernels/block_attention_packed/packed_heads.cuh"
#include "kernels/block_attention_packed_backward/block_attention_packed_backward.h"
#include "kernels/common/cuda/attention_row_dot.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/layout_tables.h"

namespace tessera {


void op::BlockAttentionPackedBackward::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                        const Attrs& a) {
  const Tensor &g = in[0], &qkv = in[1], &o = in[2], &lse = in[3], &dqkv = out[0];
  const std::vector<int64_t> s = detail::packed_attention_sizes(kName, qkv.meta(), a.layout, a.heads, a.kv_heads);
  const int64_t B = s[0], T = s[1], D = s[2], H = a.heads, K = a.kv_heads, W = (H + 2 * K) * D;
  if (dqkv.numel() == 0) return;
  const int32_t* base = in.size() == 5 ? static_cast<const int32_t*>(in[4].data_ptr()) : nullptr;
  const cudaStream_t stream = cuda::current_stream(dqkv);
  const bool half = qkv.dtype() == DType::bf16 || qkv.dtype() == DType::f16;
  if (half) {
    const AttentionLayoutPtr& layout = a.layout->refined64() ? a.layout->refined64() : a.layout;
    const cuda::AttentionTables tables = cuda::device_tables(layout, dqkv.device().index);
    const auto* x = static_cast<const char*>(qkv.data_ptr());
    auto* y = static_cast<char*>(dqkv.data_ptr());
    const size_t es = dtype_size(qkv.dtype());
    cuda::FlashBackward f{qkv.dtype(), static_cast<int>(layout->block_size()), B, H, layout->blocks(), D,
                          detail::attention_scale(a.scale, D), g.data_ptr(), x, x + H * D * es,
                          x + (H + K) * D * es, static_cast<const float*>(lse.data_ptr()),
                          /*delta: below*/ nullptr, y, y + H * D * es, y + (H + K) * D * es,
                          tables.row_ptr, tables.key_blocks, tables.col_ptr, tables.query_blocks,
                          AttentionDropout::make(a.dropout, a.seed, a.start), base};
    f.G = H / K;
    f.qs = f.kvs = {T * W, D, W};
    f.os = {T * H * D, D, H * D};
    if (cuda::flash_backward_supported(f, dqkv.device().index)) {
      Tensor delta = empty({B * H * T}, TensorOptions(DType::f32).device(dqkv.device()));  // Δ [B·H·T]
      f.delta = static_cast<const float*>(delta.data_ptr());
      cuda::dispatch_cuda_float(qkv.dtype(), kName, [&](auto tag) {
        using T_ = typename decltype(tag)::type;
        if constexpr (std::is_same_v<cuda::acc_t<T_>, float>)  // bf16/f16 here (f32 and f64 are not `half`)
          cuda::attention_row_dot<T_>(static_cast<const T_*>(g.data_ptr()), static_cast<const T_*>(o.data_ptr()),
                                      f.os, static_cast<float*>(delta.data_ptr()), B, H, T, D, stream);
      });
      return cuda::flash_backward(f, stream);
    }
  }
  const TensorOptions opts = TensorOptions(qkv.dtype()).device(qkv.device());
  Tensor g4 = empty({B, H, T, D}, opts), o4 = empty({B, H, T, D}, opts), q = empty({B, H, T, D}, opts);
  Tensor k = empty({B, K, T, D}, opts), v = empty({B, K, T, D}, opts);
  Tensor dq = empty({B, H, T, D}, opts), dk = empty({B, K, T, D}, opts), dv = empty({B, K, T, D}, opts);
  auto ptr = [](const Tensor& t) { return t.data_ptr(); };
  cuda::dispatch_cuda_float(qkv.dtype(), kName, [&](auto tag) {
    using T_ = typename decltype(tag)::type;
    auto c = [&](const Tensor& t) { return static_cast<const T_*>(ptr(t)); };
    auto m = [&](const Tensor& t) { return static_cast<T_*>(ptr(t)); };
    packed::copy_heads(c(g), m(g4), B, H, T, D, H * D, 0, false, stream);
    packed::copy_heads(c(o), m(o4), B, H, T, D, H * D, 0, false, stream);
    packed::copy_heads(c(qkv), m(q), B, H, T, D, W, 0, false, stream);
    packed::copy_heads(c(qkv), m(k), B, K, T, D, W, H * D, false, stream);
    packed::copy_heads(c(qkv), m(v), B, K, T, D, W, (H + K) * D, false, stream);
    TS_CUDA_LAUNCH_CHECK(kName);
  });
  std::vector<Tensor> args{g4, q, k, v, o4, lse};
  if (in.size() == 5) args.push_back(in[4]);
  op::BlockAttentionBackward::cuda(args, {dq, dk, dv}, {a.layout, a.scale, a.dropout, a.seed, a.start});
  cuda::dispatch_cuda_float(qkv.dtype(), kName, [&](auto tag) {
    using T_ = typename decltype(tag)::type;
    auto c = [&](const Tensor& t) { return static_cast<const T_*>(ptr(t)); };
    T_* y = static_cast<T_*>(dqkv.data_ptr());
    packed::copy_heads(c(dq), y, B, H, T, D, W, 0, true, stream);
    packed::copy_heads(c(dk), y, B, K, T, D, W, H * D, true, stream);
    packed::copy_heads(c(dv), y, B, K, T, D, W, (H + K) * D, true, stream);
    TS_CUDA_LAUNCH_CHECK(kName);
  });
}

}  // namespace tessera
