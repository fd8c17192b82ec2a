#include "kernels/block_attention_packed_backward/block_attention_packed_backward.h"

#include "kernels/block_attention/block_attention.h"
#include "kernels/block_attention_backward/block_attention_backward.h"
#include "kernels/block_attention_packed/packed_heads.h"
#include "kernels/common/dispatch.h"

namespace tessera {

std::vector<TensorMeta> op::BlockAttentionPackedBackward::infer(const std::vector<TensorMeta>& in, const Attrs& a) {
  TS_CHECK(in.size() == 4 || in.size() == 5, ValueError,
           kName << ": expected 4 or 5 inputs (g, qkv, o, lse, optional Philox base), got " << in.size());
  const TensorMeta& qkv = in[1];
  const std::vector<int64_t> s = detail::packed_attention_sizes(kName, qkv, a.layout, a.heads, a.kv_heads);
  const TensorMeta o{Shape{s[0] * s[1], a.heads * s[2]}, qkv.dtype, qkv.device};
  const TensorMeta lse{Shape{s[0], a.heads, s[1]}, qkv.dtype == DType::f64 ? DType::f64 : DType::f32, qkv.device};
  TS_CHECK(in[0] == o, ShapeError, kName << ": output gradient " << in[0] << " must be " << o << " for qkv " << qkv);
  TS_CHECK(in[2] == o, ShapeError, kName << ": saved output " << in[2] << " must be " << o << " for qkv " << qkv);
  TS_CHECK(in[3] == lse, ShapeError, kName << ": saved lse " << in[3] << " must be " << lse << " for qkv " << qkv);
  detail::check_attention_dropout(kName, a.dropout, qkv, in.size() == 5 ? &in[4] : nullptr);
  return {qkv};
}

void op::BlockAttentionPackedBackward::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                                       const Attrs& a) {
  const std::vector<int64_t> s = detail::packed_attention_sizes(kName, in[1].meta(), a.layout, a.heads, a.kv_heads);
  const int64_t B = s[0], T = s[1], D = s[2], H = a.heads, K = a.kv_heads, W = (H + 2 * K) * D;
  const TensorOptions opts = TensorOptions(in[1].dtype());
  Tensor g = empty({B, H, T, D}, opts), o = empty({B, H, T, D}, opts), q = empty({B, H, T, D}, opts);
  Tensor k = empty({B, K, T, D}, opts), v = empty({B, K, T, D}, opts);
  Tensor dq = empty({B, H, T, D}, opts), dk = empty({B, K, T, D}, opts), dv = empty({B, K, T, D}, opts);
  dispatch_float(in[1].dtype(), kName, [&](auto tag) {
    using T_ = typename decltype(tag)::type;
    const T_* x = in[1].data<T_>();
    packed::unpack(in[0].data<T_>(), H * D, 0, B, H, T, D, g.data<T_>());
    packed::unpack(in[2].data<T_>(), H * D, 0, B, H, T, D, o.data<T_>());
    packed::unpack(x, W, 0, B, H, T, D, q.data<T_>());
    packed::unpack(x, W, H * D, B, K, T, D, k.data<T_>());
    packed::unpack(x, W, (H + K) * D, B, K, T, D, v.data<T_>());
  });
  std::vector<Tensor> args{g, q, k, v, o, in[3]};
  if (in.size() == 5) args.push_back(in[4]);
  op::BlockAttentionBackward::cpu(args, {dq, dk, dv}, {a.layout, a.scale, a.dropout, a.seed, a.start});
  dispatch_float(in[1].dtype(), kName, [&](auto tag) {
    using T_ = typename decltype(tag)::type;
    T_* y = out[0].data<T_>();
    packed::pack(dq.data<T_>(), B, H, T, D, y, W, 0);
    packed::pack(dk.data<T_>(), B, K, T, D, y, W, H * D);
    packed::pack(dv.data<T_>(), B, K, T, D, y, W, (H + K) * D);
  });
}

}  // namespace tessera
