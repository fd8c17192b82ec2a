#include "models/transformer_lm.h"

#include <utility>
#include <vector>

#include "core/autocast.h"
#include "core/graph/trace.h"
#include "core/sparse/block_layout.h"
#include "kernels/ops.h"
#include "models/config_reader.h"

namespace tessera {
namespace models {

// ---- config ----

TransformerLMConfig TransformerLMConfig::from_json(const nlohmann::json& j) {
  ConfigReader r(j, "TransformerLM");
  TransformerLMConfig c;
  c.vocab = r.require<int64_t>("vocab");
  c.seq_len = r.get<int64_t>("seq_len", c.seq_len);
  c.width = r.get<int64_t>("width", c.width);
  c.layers = r.get<int64_t>("layers", c.layers);
  c.heads = r.get<int64_t>("heads", c.heads);
  c.mlp_ratio = r.get<int64_t>("mlp_ratio", c.mlp_ratio);
  c.activation = r.get<std::string>("activation", c.activation);
  c.attn_block = r.get<int64_t>("attn_block", c.attn_block);
  c.attn_layout = r.get<std::string>("attn_layout", c.attn_layout);
  c.window = r.get<int64_t>("window", c.window);
  c.stride = r.get<int64_t>("stride", c.stride);
  c.summary = r.get<int64_t>("summary", c.summary);
  c.linear_block = r.get<int64_t>("linear_block", c.linear_block);
  c.density = r.get<double>("density", c.density);
  c.tied = r.get<bool>("tied", c.tied);
  c.dropout = r.get<double>("dropout", c.dropout);
  c.attention_dropout = r.get<double>("attention_dropout", c.attention_dropout);
  c.qk_norm = r.get<bool>("qk_norm", c.qk_norm);
  c.attn_impl = r.get<std::string>("attn_impl", c.attn_impl);
  c.recompute = r.get<bool>("recompute", c.recompute);
  c.seed = r.get<int64_t>("seed", c.seed);
  r.finish();

  // Single fields.
  const std::pair<const char*, int64_t> sizes[] = {{"vocab", c.vocab}, {"seq_len", c.seq_len},
                                                   {"width", c.width}, {"layers", c.layers},
                                                   {"heads", c.heads}, {"mlp_ratio", c.mlp_ratio}};
  for (const auto& [key, value] : sizes) r.check(value > 0, key, "must be positive");
  r.check(c.activation == "gelu" || c.activation == "gelu_tanh" || c.activation == "fast_gelu", "activation",
          "must be \"gelu\", \"gelu_tanh\" or \"fast_gelu\"");
  r.check(AttentionLayout::valid_block_size(c.attn_block), "attn_block", "must be 8, 16, 32, 64 or 128");
  r.check(c.attn_layout == "dense" || c.attn_layout == "local" || c.attn_layout == "fixed" ||
              c.attn_layout == "strided",
          "attn_layout", "must be \"dense\", \"local\", \"fixed\" or \"strided\"");
  r.check(c.window >= 1, "window", "must be >= 1 (attention blocks)");
  r.check(c.stride >= 1, "stride", "must be >= 1 (attention blocks)");
  r.check(c.summary >= 1 && c.summary <= c.stride, "summary",
          "must be in [1, stride=" + std::to_string(c.stride) + "] (attention blocks)");
  r.check(c.linear_block == 0 || BlockLayout::valid_block_size(c.linear_block), "linear_block",
          "must be 0 (dense) or 8, 16, 32, 64");
  r.check(c.density > 0 && c.density <= 1, "density", "must be in (0, 1]");
  r.check(c.dropout >= 0 && c.dropout < 1, "dropout", "must be in [0, 1)");
  r.check(c.attention_dropout >= 0 && c.attention_dropout < 1, "attention_dropout", "must be in [0, 1)");
  r.check(c.seed >= 0, "seed", "must be >= 0");
  r.check(c.attn_impl == "auto" || c.attn_impl == "dense", "attn_impl", "must be \"auto\" or \"dense\"");
  // Fields that must agree.
  r.check(c.width % c.heads == 0, "width", "must be a multiple of heads=" + std::to_string(c.heads));
  r.check(c.seq_len % c.attn_block == 0, "seq_len",
          "must be a multiple of attn_block=" + std::to_string(c.attn_block));
  r.check(c.linear_block == 0 || c.width % c.linear_block == 0, "linear_block",
          "must divide width=" + std::to_string(c.width));
  r.check(c.density == 1 || c.linear_block > 0, "density", "needs block-sparse weights (linear_block > 0)");
  r.check(c.attn_impl == "auto" || c.attn_layout == "dense", "attn_impl",
          "\"dense\" needs attn_layout \"dense\" (got \"" + c.attn_layout + "\")");
  return c;
}

nlohmann::json TransformerLMConfig::to_json() const {
  return nlohmann::json{{"vocab", vocab},
                        {"seq_len", seq_len},
                        {"width", width},
                        {"layers", layers},
                        {"heads", heads},
                        {"mlp_ratio", mlp_ratio},
                        {"activation", activation},
                        {"attn_block", attn_block},
                        {"attn_layout", attn_layout},
                        {"window", window},
                        {"stride", stride},
                        {"summary", summary},
                        {"linear_block", linear_block},
                        {"density", density},
                        {"tied", tied},
                        {"dropout", dropout},
                        {"attention_dropout", attention_dropout},
                        {"qk_norm", qk_norm},
                        {"attn_impl", attn_impl},
                        {"recompute", recompute},
                        {"seed", seed}};
}

void TransformerLMConfig::validate() const { from_json(to_json()); }

// ---- model ----

// The container of the blocks: children "0", "1", ... so paths read "blocks.3.attn.qkv.weight".
class TransformerLM::Blocks : public nn::Module {
 public:
  void add(std::shared_ptr<nn::TransformerBlock> b) {
    list.push_back(register_module(std::to_string(list.size()), std::move(b)));
  }
  std::vector<std::shared_ptr<nn::TransformerBlock>> list;
};

TransformerLM::TransformerLM(const TransformerLMConfig& cfg) : cfg_(cfg) {
  cfg.validate();
  Generator gen(static_cast<uint64_t>(cfg.seed));
  const int64_t V = cfg.vocab, T = cfg.seq_len, C = cfg.width;
  const uint64_t seed = static_cast<uint64_t>(cfg.seed);
  // One attention layout shared by every block (layouts are immutable).
  layout_ = nn::make_attention_layout(nn::AttentionOptions(C, cfg.heads, T)
                                          .block_size(cfg.attn_block)
                                          .layout(nn::attention_layout_kind_from_string(cfg.attn_layout))
                                          .window(cfg.window)
                                          .stride(cfg.stride)
                                          .summary(cfg.summary));
  tok_emb_ = register_module("tok_emb", std::make_shared<nn::Embedding>(nn::EmbeddingOptions(V, C), gen));
  pos_emb_ = register_parameter("pos_emb", normal({T, C}, 0.0, 0.02, gen));
  drop_ = register_module("drop", std::make_shared<nn::Dropout>(nn::DropoutOptions(cfg.dropout)));
  blocks_ = register_module("blocks", std::make_shared<Blocks>());
  const nn::Activation act = nn::activation_from_string(cfg.activation);
  for (int64_t l = 0; l < cfg.layers; ++l) {
    // Layout seeds of the block-sparse weights: qkv, proj, fc, fc2 of layer l get seed + 4l + 0..3.
    const uint64_t s = seed + 4 * static_cast<uint64_t>(l);
    nn::AttentionOptions attn = nn::AttentionOptions(C, cfg.heads, T)
                                    .block_size(cfg.attn_block)
                                    .layout(layout_)
                                    .linear_block_size(cfg.linear_block)
                                    .density(cfg.density, s)
                                    .dropout(cfg.dropout)
                                    .attention_dropout(cfg.attention_dropout)
                                    .qk_norm(cfg.qk_norm)
                                    .impl(nn::attention_impl_from_string(cfg.attn_impl));
    blocks_->add(std::make_shared<nn::TransformerBlock>(nn::TransformerBlockOptions(attn)
                                                            .mlp_ratio(cfg.mlp_ratio)
                                                            .activation(act)
                                                            .linear_block_size(cfg.linear_block)
                                                            .density(cfg.density, s + 2)
                                                            .dropout(cfg.dropout),
                                                        gen));
  }
  ln_f_ = register_module("ln_f", std::make_shared<nn::LayerNorm>(nn::LayerNormOptions(C)));
  if (!cfg.tied)
    out_ = register_module("out", std::make_shared<nn::Linear>(nn::LinearOptions(C, V).bias(false), gen));
}

const nn::TransformerBlock& TransformerLM::block(int64_t l) const {
  TS_CHECK(l >= 0 && l < cfg_.layers, ValueError, "TransformerLM: block " << l << " of " << cfg_.layers);
  return *blocks_->list[static_cast<size_t>(l)];
}

Tensor TransformerLM::logits(const Tensor& ids, int64_t B, Generator& dropout_gen) const {
  const int64_t T = cfg_.seq_len, C = cfg_.width;
  TS_CHECK(B > 0 && ids.dim() == 1 && ids.size(0) == B * T, ShapeError,
           "TransformerLM: ids " << ids.meta() << " must be [B*T] = [" << B << "*" << T << "]");
  Tensor x = reshape(add(reshape(tok_emb_->forward(ids), {B, T, C}), pos_emb_), {B * T, C});  // [B*T, C]
  if (is_training() && cfg_.dropout > 0) x = drop_->forward(x, dropout_gen);
  for (const auto& blk : blocks_->list) {
    if (cfg_.recompute)
      x = graph::recompute([&] { return blk->forward(x, B, dropout_gen); });
    else
      x = blk->forward(x, B, dropout_gen);
  }
  // ln_f feeds only the output product: under autocast it writes that product's operand dtype.
  x = ln_f_->forward(x, autocast::operand_dtype(x));
  // Tied: [B*T, C]·[V, C]ᵀ with the transpose flag, no copy of the table.
  return out_ ? out_->forward(x) : matmul(x, tok_emb_->weight(), false, true);  // [B*T, V]
}

std::vector<double> TransformerLM::max_attention_logits(const Tensor& ids, int64_t rows) const {
  const int64_t T = cfg_.seq_len;
  TS_CHECK(ids.dim() == 1 && ids.size(0) == T, ShapeError,
           "TransformerLM::max_attention_logits: ids " << ids.meta() << " must be one sequence [" << T << "]");
  Tensor x = add(tok_emb_->forward(ids), pos_emb_);  // [T, C]
  std::vector<double> out;
  for (const auto& blk : blocks_->list) {
    out.push_back(blk->attention().max_logit(blk->attention_input(x), rows));
    x = blk->forward(x, 1);
  }
  return out;
}

TransformerLM::DecodeState TransformerLM::start_decoding(int64_t batch) const {
  TS_CHECK(batch >= 1, ValueError, "TransformerLM::start_decoding: batch must be >= 1, got " << batch);
  DecodeState s;
  s.batch = batch;
  s.layers.resize(static_cast<size_t>(cfg_.layers));
  return s;
}

Tensor TransformerLM::decode(const Tensor& ids, int64_t n, DecodeState& state) const {
  const int64_t B = state.batch, C = cfg_.width, len = state.len;
  TS_CHECK(B >= 1 && static_cast<int64_t>(state.layers.size()) == cfg_.layers, ValueError,
           "TransformerLM::decode: the state was not made by start_decoding");
  TS_CHECK(n >= 1 && ids.dim() == 1 && ids.size(0) == B * n, ShapeError,
           "TransformerLM::decode: ids " << ids.meta() << " must be [B*n] = [" << B << "*" << n << "]");
  TS_CHECK(len + n <= cfg_.seq_len, ValueError,
           "TransformerLM::decode: " << len << " fed + " << n << " new positions pass seq_len " << cfg_.seq_len
                                     << " (start a new state and feed what should stay)");
  TS_CHECK(!is_training() || cfg_.dropout == 0, ValueError,
           "TransformerLM::decode draws no dropout: call eval() first (dropout " << cfg_.dropout << ")");
  // x = tok_emb[ids] + pos_emb[len .. len+n) as in logits(), for the new positions only.
  Tensor x = reshape(add(reshape(tok_emb_->forward(ids), {B, n, C}), slice(pos_emb_, 0, len, len + n)), {B * n, C});
  for (size_t l = 0; l < blocks_->list.size(); ++l) x = blocks_->list[l]->decode(x, B, state.layers[l]);
  x = ln_f_->forward(x, autocast::operand_dtype(x));
  state.len = len + n;
  return out_ ? out_->forward(x) : matmul(x, tok_emb_->weight(), false, true);  // [B*n, V]
}

Tensor TransformerLM::loss(const Tensor& ids, const Tensor& targets, int64_t B,
                           Generator& dropout_gen) const {
  TS_CHECK(targets.dim() == 1 && targets.size(0) == ids.numel(), ShapeError,
           "TransformerLM: targets " << targets.meta() << " must match ids " << ids.meta());
  return cross_entropy(logits(ids, B, dropout_gen), targets);
}

}  // namespace models
}  // namespace tessera
