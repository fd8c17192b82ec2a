#include "common/bench_models.h"

#include <cmath>

#include "kernels/ops.h"

namespace tessera {
namespace bench {

namespace {

constexpr double kInitStd = 0.02;

Tensor weight(const Shape& shape, Generator& gen) { return normal(shape, 0.0, kInitStd, gen).requires_grad_(); }
Tensor zeros_param(const Shape& shape) { return zeros(shape).requires_grad_(); }
Tensor ones_param(const Shape& shape) { return ones(shape).requires_grad_(); }

std::vector<Tensor> tensors_of(const std::vector<graph::NamedParam>& named) {
  std::vector<Tensor> out;
  for (const auto& p : named) out.push_back(p.tensor);
  return out;
}

// The batch size implied by ids [batch*seq] (either layout), after checking ids and targets.
int64_t batch_of(const char* model, const Tensor& ids, const Tensor& targets, int64_t seq) {
  TS_CHECK(ids.dim() == 1 && ids.size(0) > 0 && ids.size(0) % seq == 0, ShapeError,
           model << ": ids must be [n] with n a multiple of seq = " << seq << ", got " << ids.meta());
  TS_CHECK(targets.dim() == 1 && targets.size(0) == ids.size(0), ShapeError,
           model << ": targets must be like ids " << ids.meta() << ", got " << targets.meta());
  return ids.size(0) / seq;
}

}  // namespace

// ---- LSTM ----

LstmLm::LstmLm(const LstmLmConfig& cfg, Generator& gen) : cfg_(cfg) {
  TS_CHECK(cfg.batch > 0 && cfg.seq > 0 && cfg.hidden > 0 && cfg.vocab > 0, ValueError,
           "LstmLm: sizes must be positive");
  const int64_t H = cfg.hidden, V = cfg.vocab;
  embed_ = weight({V, H}, gen);
  wx_ = weight({H, 4 * H}, gen);
  wh_ = weight({H, 4 * H}, gen);
  std::vector<float> b(4 * H, 0.0f);
  for (int64_t j = H; j < 2 * H; ++j) b[j] = 1.0f;  // forget gate: remember by default
  bias_ = from_vector(b, {4 * H}).requires_grad_();
  wout_ = weight({H, V}, gen);
  bout_ = zeros_param({V});
}

Tensor LstmLm::loss(const Tensor& ids, const Tensor& targets, int64_t recompute_chunk) const {
  const int64_t T = cfg_.seq, H = cfg_.hidden;
  batch_of("LstmLm", ids, targets, T);  // checks the shapes; the batch is implied by chunk()
  // One split into the T steps' inputs rather than T slices: the backward of a split is one
  // concat, while each slice's backward would write a zero-padded (T*B, H) gradient.
  std::vector<Tensor> xs = chunk(embedding(embed_, ids), T, 0);  // T x (B, H)
  Tensor h, c;                                                    // (B, H); undefined = zero state
  std::vector<Tensor> hs;
  // Steps [t0, t1): updates h and c, appends each step's h to hs.
  auto steps = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      Tensor gates = matmul(xs[t], wx_);  // (B, 4H)
      if (h.defined()) gates = gates + matmul(h, wh_);
      gates = gates + bias_;
      std::vector<Tensor> g = split(gates, {H, H, H, H}, 1);  // i, f, o, u: (B, H) each
      Tensor i = sigmoid(g[0]), o = sigmoid(g[2]), u = tanh(g[3]);
      c = c.defined() ? sigmoid(g[1]) * c + i * u : i * u;  // c_{-1} = 0: the forget term vanishes
      h = o * tanh(c);
      hs.push_back(h);
    }
    return 0;
  };
  if (recompute_chunk <= 0) {
    steps(0, T);
  } else {
    // Each chunk of time steps is a recompute region: only h and c at chunk boundaries (and
    // the chunk's outputs) are kept; the chunk's gates are recomputed during backward.
    for (int64_t t0 = 0; t0 < T; t0 += recompute_chunk)
      graph::recompute([&] { return steps(t0, std::min(T, t0 + recompute_chunk)); });
  }
  Tensor logits = matmul(concat(hs, 0), wout_) + bout_;  // (T*B, V)
  return cross_entropy(logits, targets);
}

std::vector<graph::NamedParam> LstmLm::named_parameters() const {
  return {{"embed", embed_}, {"lstm.wx", wx_},       {"lstm.wh", wh_},
          {"lstm.bias", bias_}, {"out.weight", wout_}, {"out.bias", bout_}};
}

std::vector<Tensor> LstmLm::parameters() const { return tensors_of(named_parameters()); }

// ---- transformer ----

TransformerLm::TransformerLm(const TransformerLmConfig& cfg, Generator& gen) : cfg_(cfg) {
  TS_CHECK(cfg.batch > 0 && cfg.seq > 0 && cfg.width > 0 && cfg.heads > 0 && cfg.layers > 0 && cfg.vocab > 0 &&
               cfg.mlp_ratio > 0,
           ValueError, "TransformerLm: sizes must be positive");
  TS_CHECK(cfg.width % cfg.heads == 0, ValueError,
           "TransformerLm: width " << cfg.width << " is not a multiple of heads " << cfg.heads);
  const int64_t C = cfg.width, T = cfg.seq, V = cfg.vocab, M = cfg.mlp_ratio * cfg.width;
  tok_emb_ = weight({V, C}, gen);
  pos_emb_ = weight({T, C}, gen);
  for (int64_t l = 0; l < cfg.layers; ++l) {
    Block b;
    b.ln1_w = ones_param({C});
    b.ln1_b = zeros_param({C});
    b.qkv_w = weight({C, 3 * C}, gen);
    b.qkv_b = zeros_param({3 * C});
    b.proj_w = weight({C, C}, gen);
    b.proj_b = zeros_param({C});
    b.ln2_w = ones_param({C});
    b.ln2_b = zeros_param({C});
    b.fc_w = weight({C, M}, gen);
    b.fc_b = zeros_param({M});
    b.fc2_w = weight({M, C}, gen);
    b.fc2_b = zeros_param({C});
    blocks_.push_back(b);
  }
  lnf_w_ = ones_param({C});
  lnf_b_ = zeros_param({C});
  out_w_ = weight({C, V}, gen);
  std::vector<float> mask(T * T, 0.0f);
  for (int64_t q = 0; q < T; ++q)
    for (int64_t k = q + 1; k < T; ++k) mask[q * T + k] = -1e9f;  // a query sees no later key
  causal_mask_ = from_vector(mask, {T, T});
}

Tensor TransformerLm::block_forward(const Block& blk, const Tensor& x, int64_t B) const {
  const int64_t T = cfg_.seq, C = cfg_.width, NH = cfg_.heads, D = C / NH;
  // Attention: x + proj(softmax(q·kᵀ/√D + mask)·v), heads computed as one batched matmul.
  Tensor qkv = matmul(layer_norm(x, blk.ln1_w, blk.ln1_b), blk.qkv_w) + blk.qkv_b;  // (B*T, 3C)
  qkv = permute(reshape(qkv, {B, T, 3, NH, D}), {2, 0, 3, 1, 4});                    // (3, B, NH, T, D)
  std::vector<Tensor> parts = split(reshape(qkv, {3, B * NH, T, D}), {1, 1, 1}, 0);
  Tensor q = reshape(parts[0], {B * NH, T, D}), k = reshape(parts[1], {B * NH, T, D}),
         v = reshape(parts[2], {B * NH, T, D});
  Tensor scores = matmul(q, k, false, true) * (1.0 / std::sqrt(static_cast<double>(D))) + causal_mask_;  // (B*NH, T, T)
  Tensor att = matmul(softmax(scores), v);                                          // (B*NH, T, D)
  att = reshape(permute(reshape(att, {B, NH, T, D}), {0, 2, 1, 3}), {B * T, C});    // heads merged: (B*T, C)
  Tensor y = x + (matmul(att, blk.proj_w) + blk.proj_b);
  // MLP: y + fc2(gelu(fc(ln2(y)))).
  Tensor m = gelu(matmul(layer_norm(y, blk.ln2_w, blk.ln2_b), blk.fc_w) + blk.fc_b);  // (B*T, 4C)
  return y + (matmul(m, blk.fc2_w) + blk.fc2_b);
}

Tensor TransformerLm::loss(const Tensor& ids, const Tensor& targets, bool recompute_blocks) const {
  const int64_t T = cfg_.seq, C = cfg_.width;
  const int64_t B = batch_of("TransformerLm", ids, targets, T);
  Tensor x = reshape(embedding(tok_emb_, ids), {B, T, C}) + pos_emb_;  // (B, T, C): positions broadcast over B
  x = reshape(x, {B * T, C});
  for (const Block& blk : blocks_)
    x = recompute_blocks ? graph::recompute([&] { return block_forward(blk, x, B); }) : block_forward(blk, x, B);
  Tensor logits = matmul(layer_norm(x, lnf_w_, lnf_b_), out_w_);  // (B*T, V)
  return cross_entropy(logits, targets);
}

std::vector<graph::NamedParam> TransformerLm::named_parameters() const {
  std::vector<graph::NamedParam> out = {{"tok_emb", tok_emb_}, {"pos_emb", pos_emb_}};
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const Block& b = blocks_[l];
    const std::string p = "blocks." + std::to_string(l) + ".";
    out.push_back({p + "ln1.weight", b.ln1_w});
    out.push_back({p + "ln1.bias", b.ln1_b});
    out.push_back({p + "attn.qkv.weight", b.qkv_w});
    out.push_back({p + "attn.qkv.bias", b.qkv_b});
    out.push_back({p + "attn.proj.weight", b.proj_w});
    out.push_back({p + "attn.proj.bias", b.proj_b});
    out.push_back({p + "ln2.weight", b.ln2_w});
    out.push_back({p + "ln2.bias", b.ln2_b});
    out.push_back({p + "mlp.fc.weight", b.fc_w});
    out.push_back({p + "mlp.fc.bias", b.fc_b});
    out.push_back({p + "mlp.fc2.weight", b.fc2_w});
    out.push_back({p + "mlp.fc2.bias", b.fc2_b});
  }
  out.push_back({"ln_f.weight", lnf_w_});
  out.push_back({"ln_f.bias", lnf_b_});
  out.push_back({"out.weight", out_w_});
  return out;
}

std::vector<Tensor> TransformerLm::parameters() const { return tensors_of(named_parameters()); }

// ---- data ----

Tensor random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  TS_CHECK(n >= 0 && vocab > 0, ValueError, "random_tokens: need n >= 0 and vocab > 0, got " << n << ", " << vocab);
  std::vector<int32_t> ids(n);
  uint64_t s = seed;
  for (auto& id : ids) {
    // splitmix64: a fixed, portable stream (std:: distributions differ between libraries).
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    id = static_cast<int32_t>((z ^ (z >> 31)) % static_cast<uint64_t>(vocab));
  }
  return from_vector(ids, {n});
}

}  // namespace bench
}  // namespace tessera
