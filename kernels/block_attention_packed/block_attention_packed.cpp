#include "kernels/block_attention_packed/block_attention_packed.h"

#include <cmath>

#include "core/autocast.h"
#include "kernels/block_attention/block_attention.h"
#include "kernels/block_attention_packed/packed_heads.h"
#include "kernels/block_attention_packed_backward/block_attention_packed_backward.h"
#include "kernels/cast/cast.h"
#include "kernels/common/dispatch.h"

namespace tessera {

Tensor block_attention_packed(const Tensor& qkv, int64_t heads, int64_t kv_heads, const AttentionLayoutPtr& layout,
                              double scale, double dropout, Generator& gen) {
  const std::vector<int64_t> sizes = detail::packed_attention_sizes(op::BlockAttentionPacked::kName, qkv.meta(), layout, heads, kv_heads);
  const int64_t B = sizes[0], T = sizes[1], D = sizes[2];
  op::BlockAttentionPacked::Attrs attrs{layout, heads, kv_heads, detail::attention_scale(scale, D)};
  detail::check_attention_dropout(op::BlockAttentionPacked::kName, dropout, qkv.meta(), nullptr);
  if (dropout > 0) {
    attrs.dropout = dropout;
    attrs.seed = gen.seed();
    attrs.start = gen.reserve(detail::attention_dropout_blocks(Shape{B, heads, T, D}));
  }
  if (autocast::applies({&qkv}))  // a low-precision qkv; f32 result
    return cast(call<op::BlockAttentionPacked>(attrs, {autocast::operand(qkv)})[0], DType::f32);
  return call<op::BlockAttentionPacked>(attrs, {qkv})[0];
}

namespace detail {

std::vector<int64_t> packed_attention_sizes(const char* op, const TensorMeta& qkv, const AttentionLayoutPtr& layout,
                                            int64_t H, int64_t Hkv) {
  check_floating(op, qkv, "qkv");
  TS_CHECK(layout != nullptr, ValueError, op << ": no attention layout given (qkv " << qkv << ")");
  TS_CHECK(H >= 1 && Hkv >= 1 && H % Hkv == 0, ValueError,
           op << ": heads " << H << " must be a positive multiple of kv_heads " << Hkv);
  TS_CHECK(layout->heads() == H, ShapeError,
           op << ": " << H << " heads but the layout has " << layout->heads() << ": " << layout->str());
  const int64_t T = layout->seq_len(), width = H + 2 * Hkv;
  TS_CHECK(qkv.shape.ndim() == 2 && qkv.shape[0] > 0 && qkv.shape[0] % T == 0 && qkv.shape[1] > 0 &&
               qkv.shape[1] % width == 0,
           ShapeError,
           op << ": qkv must be [B*T, (heads + 2*kv_heads)*D] = [B*" << T << ", " << width << "*D], got " << qkv);
  return {qkv.shape[0] / T, T, qkv.shape[1] / width};
}

}  // namespace detail

std::vector<TensorMeta> op::BlockAttentionPacked::infer(const std::vector<TensorMeta>& in, const Attrs& a) {
  TS_CHECK(in.size() == 1 || in.size() == 2, ValueError,
           kName << ": expected 1 or 2 inputs (qkv, optional Philox base), got " << in.size());
  const std::vector<int64_t> s = detail::packed_attention_sizes(kName, in[0], a.layout, a.heads, a.kv_heads);
  TS_CHECK(std::isfinite(a.scale), ValueError, kName << ": scale must be finite, got " << a.scale);
  detail::check_attention_dropout(kName, a.dropout, in[0], in.size() == 2 ? &in[1] : nullptr);
  const DType stats = in[0].dtype == DType::f64 ? DType::f64 : DType::f32;
  return {TensorMeta{Shape{s[0] * s[1], a.heads * s[2]}, in[0].dtype, in[0].device},
          TensorMeta{Shape{s[0], a.heads, s[1]}, stats, in[0].device}};
}

void op::BlockAttentionPacked::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
  const std::vector<int64_t> s = detail::packed_attention_sizes(kName, in[0].meta(), a.layout, a.heads, a.kv_heads);
  const int64_t B = s[0], T = s[1], D = s[2], H = a.heads, K = a.kv_heads, W = (H + 2 * K) * D;
  const TensorOptions opts = TensorOptions(in[0].dtype());
  Tensor q = empty({B, H, T, D}, opts), k = empty({B, K, T, D}, opts), v = empty({B, K, T, D}, opts);
  Tensor o = empty({B, H, T, D}, opts);
  dispatch_float(in[0].dtype(), kName, [&](auto tag) {
    using T_ = typename decltype(tag)::type;
    const T_* x = in[0].data<T_>();
    packed::unpack(x, W, 0, B, H, T, D, q.data<T_>());
    packed::unpack(x, W, H * D, B, K, T, D, k.data<T_>());
    packed::unpack(x, W, (H + K) * D, B, K, T, D, v.data<T_>());
  });
  std::vector<Tensor> args{q, k, v};
  if (in.size() == 2) args.push_back(in[1]);
  op::BlockAttention::cpu(args, {o, out[1]}, {a.layout, a.scale, a.dropout, a.seed, a.start});
  dispatch_float(in[0].dtype(), kName, [&](auto tag) {
    using T_ = typename decltype(tag)::type;
    packed::pack(o.data<T_>(), B, H, T, D, out[0].data<T_>(), H * D, 0);
  });
}

std::vector<Tensor> op::BlockAttentionPacked::backward(const BackwardContext& ctx, const Attrs& a) {
  std::vector<Tensor> in{ctx.grad_output(0), ctx.input(0), ctx.output(0), ctx.output(1)};
  if (ctx.num_inputs() == 2) in.push_back(ctx.input(1));  // the Philox base: the same mask
  std::vector<Tensor> d{call<op::BlockAttentionPackedBackward>(a, in)[0]};
  if (ctx.num_inputs() == 2) d.push_back(Tensor());  // no gradient for the base
  return d;
}

}  // namespace tessera
