// block_attention_packed on the GPU: the tensor-core forward (flash_sm80.h) reads q, k, v from
// the packed rows qkv [B·T, (H + 2·Hkv)·D] (row strides W = (H + 2·Hkv)·D, head stride D) and
// writes o [B·T, H·D] in place; cases it does not take (f32, f64, blocks of 8 and 16, other head
// dims) unpack into [B, heads, T, D] temporaries, run block_attention's kernels and pack o.
#include "core/cuda/check.cuh"
#include "kernels/block_attention/attention_dropout.h"
#include "kernels/block_attention/block_attention.h"
#include "kernels/block_attention/flash_sm80.h"
#include "kernels/block_attention_packed/block_attention_packed.h"
#include "kernels/block_attention_packed/packed_heads.cuh"
#include "kernels/common/cuda/dtype.cuh"
#include "kernels/common/cuda/layout_tables.h"

namespace tessera {

void op::BlockAttentionPacked::cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  const Tensor &qkv = in[0], &o = out[0], &lse = out[1];
  const std::vector<int64_t> s = detail::packed_attention_sizes(kName, qkv.meta(), a.layout, a.heads, a.kv_heads);
  const int64_t B = s[0], T = s[1], D = s[2], H = a.heads, K = a.kv_heads, W = (H + 2 * K) * D;
  if (o.numel() == 0) return;
  const int32_t* base = in.size() == 2 ? static_cast<const int32_t*>(in[1].data_ptr()) : nullptr;
  const cudaStream_t stream = cuda::current_stream(o);
  {
    // Blocks of 128 run as their refinement into 64-blocks (the same token-level pattern).
    const AttentionLayoutPtr& layout = a.layout->refined64() ? a.layout->refined64() : a.layout;
    const cuda::AttentionTables tables = cuda::device_tables(layout, o.device().index);
    const auto* x = static_cast<const char*>(qkv.data_ptr());
    const size_t es = dtype_size(qkv.dtype());
    cuda::FlashForward f{qkv.dtype(), static_cast<int>(layout->block_size()), B, H, layout->blocks(), D, detail::attention_scale(a.scale, D),
                         x,           x + H * D * es,  x + (H + K) * D * es,  o.data_ptr(),
                         static_cast<float*>(lse.data_ptr()),              tables.row_ptr, tables.key_blocks,
                         AttentionDropout::make(a.dropout, a.seed, a.start), base};
    f.G = H / K;
    f.qs = f.kvs = {T * W, D, W};
    f.os = {T * H * D, D, H * D};
    if (cuda::flash_forward(f, o.device().index, stream)) return;
  }
  const TensorOptions opts = TensorOptions(qkv.dtype()).device(qkv.device());
  Tensor q = empty({B, H, T, D}, opts), k = empty({B, K, T, D}, opts), v = empty({B, K, T, D}, opts);
  Tensor o4 = empty({B, H, T, D}, opts);
  cuda::dispatch_cuda_float(qkv.dtype(), kName, [&](auto tag) {
    using T_ = typename decltype(tag)::type;
    const T_* x = static_cast<const T_*>(qkv.data_ptr());
    packed::copy_heads(x, static_cast<T_*>(q.data_ptr()), B, H, T, D, W, 0, false, stream);
    packed::copy_heads(x, static_cast<T_*>(k.data_ptr()), B, K, T, D, W, H * D, false, stream);
    packed::copy_heads(x, static_cast<T_*>(v.data_ptr()), B, K, T, D, W, (H + K) * D, false, stream);
    TS_CUDA_LAUNCH_CHECK(kName);
  });
  std::vector<Tensor> args{q, k, v};
  if (in.size() == 2) args.push_back(in[1]);
  op::BlockAttention::cuda(args, {o4, lse}, {a.layout, a.scale, a.dropout, a.seed, a.start});
  cuda::dispatch_cuda_float(qkv.dtype(), kName, [&](auto tag) {
    using T_ = typename decltype(tag)::type;
    packed::copy_heads(static_cast<const T_*>(o4.data_ptr()), static_cast<T_*>(o.data_ptr()), B, H, T, D, H * D, 0,
                       true, stream);
    TS_CUDA_LAUNCH_CHECK(kName);
  });
}

}  // namespace tessera
