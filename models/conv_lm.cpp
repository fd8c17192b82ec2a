#include "models/conv_lm.h"

#include "kernels/ops.h"
#include "models/config_reader.h"

namespace tessera {
namespace models {

ConvLMConfig ConvLMConfig::from_json(const nlohmann::json& j) {
  ConfigReader r(j, "ConvLM");
  ConvLMConfig c;
  c.vocab = r.require<int64_t>("vocab");
  c.seq_len = r.get<int64_t>("seq_len", c.seq_len);
  c.width = r.get<int64_t>("width", c.width);
  c.layers = r.get<int64_t>("layers", c.layers);
  c.kernel = r.get<int64_t>("kernel", c.kernel);
  c.dilation_cycle = r.get<int64_t>("dilation_cycle", c.dilation_cycle);
  c.block_size = r.get<int64_t>("block_size", c.block_size);
  c.density = r.get<double>("density", c.density);
  c.edge_bias = r.get<bool>("edge_bias", c.edge_bias);
  c.seed = r.get<int64_t>("seed", c.seed);
  r.finish();
  c.validate();
  return c;
}

nlohmann::json ConvLMConfig::to_json() const {
  return {{"vocab", vocab},     {"seq_len", seq_len},     {"width", width},         {"layers", layers},
          {"kernel", kernel},   {"dilation_cycle", dilation_cycle}, {"block_size", block_size},
          {"density", density}, {"edge_bias", edge_bias}, {"seed", seed}};
}

void ConvLMConfig::validate() const {
  ConfigReader r(to_json(), "ConvLM");
  const std::pair<const char*, int64_t> sizes[] = {
      {"vocab", vocab}, {"seq_len", seq_len}, {"width", width}, {"layers", layers}};
  for (const auto& [key, value] : sizes) r.check(value > 0, key, "must be positive");
  r.check(kernel >= 2, "kernel", "must be at least 2");
  r.check(dilation_cycle >= 1 && dilation_cycle <= 16, "dilation_cycle", "must be in [1, 16]");
  r.check(BlockLayout::valid_block_size(block_size), "block_size", "must be 8, 16, 32 or 64");
  r.check(width % block_size == 0, "width", "must be a multiple of block_size=" + std::to_string(block_size));
  r.check(density > 0 && density <= 1, "density", "must be in (0, 1]");
  r.check(seed >= 0, "seed", "must be >= 0");
}

ConvLM::ConvLM(const ConvLMConfig& cfg) : config_(cfg) {
  cfg.validate();
  Generator gen(static_cast<uint64_t>(cfg.seed));
  const int64_t V = cfg.vocab, T = cfg.seq_len, C = cfg.width;
  embed_ = register_module("tok_emb", std::make_shared<nn::Embedding>(nn::EmbeddingOptions(V, C), gen));
  for (int64_t l = 0; l < cfg.layers; ++l) {
    const std::string p = std::to_string(l);
    norm_.push_back(register_module("ln" + p, std::make_shared<nn::LayerNorm>(nn::LayerNormOptions(C))));
    // Layout seed of block l: 1000·seed + l.
    auto conv = std::make_shared<nn::BlockSparseConv>(nn::BlockSparseConvOptions(C, C, {cfg.kernel}, cfg.block_size)
                                                          .dilation({cfg.dilation(l)})
                                                          .padding(ConvPadding::causal)
                                                          .density(cfg.density, 1000 * static_cast<uint64_t>(cfg.seed) +
                                                                                    static_cast<uint64_t>(l))
                                                          .weight_norm(true),
                                                      gen);
    conv_.push_back(register_module("conv" + p, conv));
    if (cfg.edge_bias)
      edge_.push_back(register_module("edge" + p, std::make_shared<nn::EdgeBias>(conv->geometry({T}), std::vector<int64_t>{T}, C)));
  }
  norm_f_ = register_module("ln_f", std::make_shared<nn::LayerNorm>(nn::LayerNormOptions(C)));
  out_ = register_module("out", std::make_shared<nn::Linear>(nn::LinearOptions(C, V), gen));
}

int64_t ConvLMConfig::receptive_field() const {
  int64_t r = 1;
  for (int64_t l = 0; l < layers; ++l) r += (kernel - 1) * dilation(l);
  return r;
}

Tensor ConvLM::logits(const Tensor& ids, int64_t batch) const {
  const int64_t T = config_.seq_len, C = config_.width;
  TS_CHECK(batch > 0 && ids.dim() == 1 && ids.size(0) == batch * T, ShapeError,
           "ConvLM: ids " << ids.meta() << " must be " << batch << " windows of seq_len " << T << " ([" << batch * T
                          << "], batch-major)");
  Tensor x = reshape(embed_->forward(ids), {batch, T, C});  // [B, T, C]
  for (size_t l = 0; l < conv_.size(); ++l) {
    Tensor h = conv_[l]->forward(norm_[l]->forward(x));
    if (!edge_.empty()) h = edge_[l]->forward(h, {T});
    x = add(x, gelu(h));
  }
  return out_->forward(reshape(norm_f_->forward(x), {batch * T, C}));  // [B*T, V]
}

Tensor ConvLM::loss(const Tensor& ids, const Tensor& targets, int64_t batch) const {
  TS_CHECK(targets.dim() == 1 && targets.size(0) == ids.numel(), ShapeError,
           "ConvLM: targets " << targets.meta() << " must match ids " << ids.meta());
  return cross_entropy(logits(ids, batch), targets);
}

}  // namespace models
}  // namespace tessera
