#include "layers/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/autocast.h"
#include "kernels/ops.h"

namespace tessera {
namespace nn {

AttentionLayoutKind attention_layout_kind_from_string(const std::string& name) {
  for (AttentionLayoutKind k : {AttentionLayoutKind::dense, AttentionLayoutKind::local, AttentionLayoutKind::fixed,
                                AttentionLayoutKind::strided})
    if (name == attention_layout_kind_name(k)) return k;
  TS_THROW(ValueError, "attention layout \"" << name << "\" is not one of dense, local, fixed, strided");
}

const char* attention_layout_kind_name(AttentionLayoutKind kind) {
  switch (kind) {
    case AttentionLayoutKind::dense: return "dense";
    case AttentionLayoutKind::local: return "local";
    case AttentionLayoutKind::fixed: return "fixed";
    case AttentionLayoutKind::strided: return "strided";
  }
  return "?";
}

AttentionImpl attention_impl_from_string(const std::string& name) {
  for (AttentionImpl i : {AttentionImpl::automatic, AttentionImpl::block, AttentionImpl::dense})
    if (name == attention_impl_name(i)) return i;
  TS_THROW(ValueError, "attention impl \"" << name << "\" is not one of auto, block, dense");
}

const char* attention_impl_name(AttentionImpl impl) {
  switch (impl) {
    case AttentionImpl::automatic: return "auto";
    case AttentionImpl::block: return "block";
    case AttentionImpl::dense: return "dense";
  }
  return "?";
}

AttentionLayoutPtr make_attention_layout(const AttentionOptions& o) {
  const int64_t T = o.seq_len(), bs = o.block_size(), H = o.heads();
  if (o.layout()) {
    const AttentionLayout& l = *o.layout();
    TS_CHECK(l.heads() == H && l.seq_len() == T, ValueError,
             "MultiHeadAttention: layout " << l.str() << " does not match heads " << H << ", seq_len " << T);
    return o.layout();
  }
  switch (o.layout_kind()) {
    case AttentionLayoutKind::dense: return AttentionLayout::dense_causal(T, bs, H);
    case AttentionLayoutKind::local: return AttentionLayout::local_window(T, bs, H, o.window());
    case AttentionLayoutKind::fixed: return AttentionLayout::fixed(T, bs, H, o.stride(), o.summary());
    case AttentionLayoutKind::strided: return AttentionLayout::strided(T, bs, H, o.stride());
  }
  TS_THROW(ValueError, "MultiHeadAttention: unknown layout kind " << static_cast<int>(o.layout_kind()));
}

MultiHeadAttention::MultiHeadAttention(const AttentionOptions& o, Generator& gen) : options_(o) {
  const int64_t C = o.width(), H = o.heads();
  TS_CHECK(C > 0 && H > 0 && o.seq_len() > 0, ValueError,
           "MultiHeadAttention: width " << C << ", heads " << H << " and seq_len " << o.seq_len()
                                        << " must be > 0");
  TS_CHECK(C % H == 0, ValueError, "MultiHeadAttention: width " << C << " is not a multiple of heads " << H);
  const int64_t Hkv = o.kv_heads();
  TS_CHECK(Hkv >= 1 && H % Hkv == 0, ValueError,
           "MultiHeadAttention: kv_heads " << Hkv << " must divide heads " << H << " (grouped-query attention)");
  layout_ = make_attention_layout(o);
  // Every causal block of every head kept (heads · nb(nb+1)/2): token-level dense causal attention.
  const int64_t nb = layout_->blocks();
  dense_causal_ = layout_->nnz() == layout_->heads() * nb * (nb + 1) / 2;
  TS_CHECK(o.impl() != AttentionImpl::dense || dense_causal_, ValueError,
           "MultiHeadAttention: impl \"dense\" needs the dense causal layout, got " << layout_->str());
  const double pa = o.attention_dropout();
  TS_CHECK(pa >= 0 && pa < 1, ValueError, "MultiHeadAttention: attention_dropout must be in [0, 1), got " << pa);
  qkv_ = Projection(ProjectionOptions(C, C + 2 * Hkv * (C / H))
                        .block_size(o.linear_block_size())
                        .density(o.density(), o.seed())
                        .bias(o.bias())
                        .dtype(o.dtype()),
                    gen);
  proj_ = Projection(ProjectionOptions(C, C)
                         .block_size(o.linear_block_size())
                         .density(o.density(), o.seed() + 1)
                         .bias(o.bias())
                         .dtype(o.dtype()),
                     gen);
  register_module("qkv", qkv_.module());
  register_module("proj", proj_.module());
  if (o.qk_norm()) {
    q_norm_ = register_module("q_norm", std::make_shared<LayerNorm>(LayerNormOptions(C).dtype(o.dtype())));
    k_norm_ = register_module("k_norm", std::make_shared<LayerNorm>(LayerNormOptions(Hkv * (C / H)).dtype(o.dtype())));
  }
  drop_ = register_module("drop", std::make_shared<Dropout>(DropoutOptions(o.dropout())));
}

bool MultiHeadAttention::uses_dense_path(const Device& device) const {
  (void)device;  // block_attention is the faster path on the CPU and on CUDA (bench/attention_gpu)
  return options_.impl() == AttentionImpl::dense;
}

Tensor MultiHeadAttention::project(const Tensor& x) const {
  // Without QK-norm q, k, v go to attention in the operand dtype: under autocast the product
  // writes them so directly (its f32 sums plus the f32 bias rounded once), no f32 [B*n, 3C].
  if (!q_norm_) return autocast::operand(qkv_.forward(x, autocast::operand_dtype(x)));
  const Tensor y = qkv_.forward(x);
  // [B*n, C | Hkv·D | Hkv·D] in one pass (qk_layer_norm: the norms on q's and k's columns in
  // place, v's copied), written in the operand dtype directly, as ln_f does.
  return qk_layer_norm(y, options_.width(), q_norm_->gamma(), q_norm_->beta(), k_norm_->gamma(), k_norm_->beta(),
                       q_norm_->options().eps(), autocast::operand_dtype(y));
}

double MultiHeadAttention::max_logit(const Tensor& x, int64_t rows) const {
  const int64_t T = options_.seq_len(), C = options_.width(), H = options_.heads(), D = C / H;
  const int64_t Hkv = options_.kv_heads();
  TS_CHECK(x.dim() == 2 && x.size(0) == T && x.size(1) == C, ShapeError,
           "MultiHeadAttention::max_logit: x " << x.meta() << " must be one sequence [T, C] = [" << T << ", " << C
                                               << "]");
  TS_CHECK(rows >= 1 && rows <= T, ValueError,
           "MultiHeadAttention::max_logit: rows " << rows << " not in [1, " << T << "]");
  const Tensor y = cast(project(x), DType::f32);  // [T, C + 2·Hkv·D]
  // q of the last rows queries [H, rows, D]; k [H, T, D] (key/value head h / G for query head h)
  const Tensor q = permute(reshape(slice(slice(y, 0, T - rows, T), 1, 0, C), {rows, H, D}), {1, 0, 2});
  Tensor k = reshape(permute(reshape(slice(y, 1, C, C + Hkv * D), {T, Hkv, D}), {1, 0, 2}), {1, Hkv, T, D});
  k = reshape(all_heads(k), {H, T, D});
  std::vector<float> mask(static_cast<size_t>(rows * T), 0.f);  // -inf at keys after the query
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t s = T - rows + i + 1; s < T; ++s) mask[static_cast<size_t>(i * T + s)] = -INFINITY;
  const Tensor s = add(matmul(q, k, false, true), from_vector(mask, {rows, T}).to(x.device()));  // [H, rows, T]
  return max(s).to(Device::cpu()).to_vector<double>()[0] * detail::attention_scale(options_.scale(), D);
}

std::vector<Tensor> MultiHeadAttention::heads_apart(const Tensor& x, int64_t B, int64_t n) const {
  const int64_t H = options_.heads(), D = options_.width() / H, Hkv = options_.kv_heads();
  if (Hkv != H) {
    // [B*n, (H + 2·Hkv)·D], columns q | k | v -> q [B, H, n, D], k, v [B, Hkv, n, D].
    const Tensor y = project(x);
    auto apart = [&](int64_t first, int64_t heads) {
      return permute(reshape(slice(y, 1, first * D, (first + heads) * D), {B, n, heads, D}), {0, 2, 1, 3});
    };
    return {apart(0, H), apart(H, Hkv), apart(H + Hkv, Hkv)};
  }
  // [B*n, 3C] -> [B, n, 3, H, D] -> [3, B, H, n, D] -> q, k, v [B, H, n, D]. Under autocast q, k,
  // v are cast once, here: the heads are moved, the scores and probabilities made and the
  // output merged in bf16/f16; proj's product returns f32.
  Tensor qkv = permute(reshape(project(x), {B, n, 3, H, D}), {2, 0, 3, 1, 4});
  std::vector<Tensor> parts = split(qkv, {1, 1, 1}, 0);
  for (Tensor& p : parts) p = reshape(p, {B, H, n, D});
  return parts;
}

Tensor MultiHeadAttention::all_heads(const Tensor& kv) const {
  const int64_t H = options_.heads(), Hkv = options_.kv_heads();
  if (Hkv == H) return kv;
  // [B, Hkv, n, D] -> [B, Hkv, G, n, D] -> [B, H, n, D]: query head h reads key/value head h / G.
  const int64_t B = kv.size(0), n = kv.size(2), D = kv.size(3);
  return reshape(expand(reshape(kv, {B, Hkv, 1, n, D}), {B, Hkv, H / Hkv, n, D}), {B, H, n, D});
}

Tensor MultiHeadAttention::merge_heads(const Tensor& o, int64_t B, int64_t n) const {
  // [B, H, n, D] -> [B, n, H, D] -> [B*n, C]
  return proj_.forward(reshape(permute(o, {0, 2, 1, 3}), {B * n, options_.width()}));
}

Tensor MultiHeadAttention::forward(const Tensor& x, int64_t B, Generator& dropout_gen) const {
  const int64_t T = options_.seq_len(), C = options_.width(), H = options_.heads(), D = C / H;
  TS_CHECK(
      B > 0 && x.dim() == 2 && x.size(0) == B * T && x.size(1) == C, ShapeError,
      "MultiHeadAttention: x " << x.meta() << " must be [B*T, C] = [" << B << "*" << T << ", " << C << "]");
  Tensor y;
  if (uses_dense_path(x.device())) {
    // Per (b, h) as a batch of B*H: s = q·kᵀ [B*H, T, T], p = causal softmax of scale·s over
    // keys <= query, o = p·v [B*H, T, D]. Only public ops: traced, any device and dtype.
    const std::vector<Tensor> qkv = heads_apart(x, B, T);
    const Tensor &q = qkv[0], &k = qkv[1], &v = qkv[2];
    const double scale = detail::attention_scale(options_.scale(), D);
    Tensor s = matmul(reshape(q, {B * H, T, D}), reshape(all_heads(k), {B * H, T, D}), false, true);
    Tensor p = causal_softmax(s, scale);
    if (is_training() && options_.attention_dropout() > 0) p = dropout(p, options_.attention_dropout(), dropout_gen);
    y = merge_heads(reshape(matmul(p, reshape(all_heads(v), {B * H, T, D})), {B, H, T, D}), B, T);
  } else {
    // block_attention on the projection's rows as they are ([B*T, (H + 2·Hkv)·D] in, [B*T, C]
    // out): no copies to move the heads apart and back. Under autocast qkv is cast once, here.
    const double pa = is_training() ? options_.attention_dropout() : 0;
    const Tensor qkv = project(x);
    y = proj_.forward(block_attention_packed(qkv, H, options_.kv_heads(), layout_, options_.scale(), pa, dropout_gen));
  }
  if (is_training() && options_.dropout() > 0) y = drop_->forward(y, dropout_gen);
  return y;
}

Tensor MultiHeadAttention::decode(const Tensor& x, int64_t B, KVCache& cache) const {
  const int64_t T = options_.seq_len(), C = options_.width(), H = options_.heads(), D = C / H;
  TS_CHECK(B > 0 && x.dim() == 2 && x.size(0) % B == 0 && x.size(0) > 0 && x.size(1) == C, ShapeError,
           "MultiHeadAttention::decode: x " << x.meta() << " must be [B*n, C] with B = " << B << ", C = " << C);
  TS_CHECK(!is_training() || (options_.dropout() == 0 && options_.attention_dropout() == 0), ValueError,
           "MultiHeadAttention::decode draws no dropout: call eval() first");
  const int64_t n = x.size(0) / B, len = cache.len, L = len + n;
  TS_CHECK(L <= T, ValueError,
           "MultiHeadAttention::decode: " << len << " cached + " << n << " new positions pass seq_len " << T
                                          << " (start a new cache)");
  const std::string held = cache.k.defined() ? cache.k.meta().str() : std::string("nothing");
  TS_CHECK(len == 0 || (cache.k.defined() && cache.k.dim() == 4 && cache.k.size(0) == B &&
                        cache.k.size(1) == options_.kv_heads() && cache.k.size(2) == len),
           ShapeError,
           "MultiHeadAttention::decode: the cache holds " << held << ", expected [" << B << ", "
                                                          << options_.kv_heads() << ", " << len << ", " << D << "]");
  // The new positions' q, k, v [B, H, n, D], as forward() makes them.
  const std::vector<Tensor> qkv = heads_apart(x, B, n);
  const Tensor& q = qkv[0];
  const Tensor k = len == 0 ? qkv[1] : concat({cache.k, qkv[1]}, 2);  // [B, H, L, D]
  const Tensor v = len == 0 ? qkv[2] : concat({cache.v, qkv[2]}, 2);
  // Scores [B, H, n, L]: 0 at the keys s <= p of the blocks that query p's layout row lists,
  // -inf elsewhere (walking each row's key blocks, not testing every key).
  const AttentionLayout& l = *layout_;
  const int64_t bs = l.block_size(), nb = l.blocks();
  std::vector<float> mask(static_cast<size_t>(H * n * L), -INFINITY);
  int64_t kept = 0;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = len + i, row = h * nb + p / bs;
      float* m = mask.data() + (h * n + i) * L;
      for (int32_t e = l.row_ptr()[row]; e < l.row_ptr()[row + 1]; ++e) {
        const int64_t s0 = l.key_blocks()[e] * bs, s1 = std::min(s0 + bs, p + 1);
        std::fill(m + s0, m + s1, 0.f);
        kept += s1 - s0;
      }
    }
  const bool masked = kept < H * n * L;  // false for one token with every earlier key kept (dense causal)
  const double scale = detail::attention_scale(options_.scale(), D);
  Tensor s = matmul(reshape(q, {B * H, n, D}), reshape(all_heads(k), {B * H, L, D}), false, true);  // [B*H, n, L]
  s = reshape(mul(s, scale), {B, H, n, L});
  if (masked) s = add(s, cast(from_vector(mask, {H, n, L}).to(x.device()), q.dtype()));
  const Tensor p = reshape(softmax(s), {B * H, n, L});
  const Tensor o = reshape(matmul(p, reshape(all_heads(v), {B * H, L, D})), {B, H, n, D});
  cache.k = k;
  cache.v = v;
  cache.len = L;
  return merge_heads(o, B, n);
}

}  // namespace nn
}  // namespace tessera
