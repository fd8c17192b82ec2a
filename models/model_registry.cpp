#include "models/model_registry.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>

#include "core/io/checkpoint.h"
#include "layers/layers.h"
#include "models/char_lstm_lm.h"
#include "models/conv_lm.h"
#include "models/model_checkpoint.h"
#include "models/transformer_lm.h"

namespace tessera {
namespace models {

namespace {

using nlohmann::json;

// The constants of a CharLSTMLM beyond its config, read from the layers' defaults.
json char_lstm_constants(const json& model) {
  const CharLSTMLMConfig c = CharLSTMLMConfig::from_json(model);
  return {{"weight_orientation", "[in, out]: y = x·W + b"},
          {"gate_order", "i, f, o, u: pre-activations [N, 4H] in four column blocks of H"},
          {"gates", "i, f, o = sigmoid, u = tanh; c' = f·c + i·u; h' = o·tanh(c')"},
          {"forget_bias", c.forget_bias},
          {"biases", {{"lstm", "one bias [4H] per layer (wx and wh have none)"}, {"out", nn::LinearOptions(1, 1).bias()}}},
          {"layer_norm_eps", nn::LayerNormOptions(1).eps()},
          {"sparse_layer_norm_eps", nn::SparseLayerNormOptions(1, 1).eps()},
          {"input", "ids [T, B] time-major; logits [T*B, vocab]"}};
}

// The constants of a TransformerLM beyond its config.
json transformer_constants(const json& model) {
  const TransformerLMConfig c = TransformerLMConfig::from_json(model);
  const nn::AttentionOptions attn(c.width, c.heads, c.seq_len);
  const double head_dim = static_cast<double>(c.width / c.heads);
  return {{"weight_orientation", "[in, out]: y = x·W + b"},
          {"layer_norm_eps", nn::TransformerBlockOptions(attn).eps()},
          {"final_layer_norm_eps", nn::LayerNormOptions(1).eps()},
          {"attention_scale", attn.scale() > 0 ? attn.scale() : 1.0 / std::sqrt(head_dim)},
          {"attention_scale_rule", "1/sqrt(width/heads)"},
          {"qkv_columns", "q | k | v, each [heads, head_dim] head-major: qkv [B*T, 3*width]"},
          {"biases",
           {{"qkv", attn.bias()}, {"proj", attn.bias()}, {"fc", nn::ProjectionOptions(1, 1).bias()},
            {"fc2", nn::ProjectionOptions(1, 1).bias()}, {"out", false}}},
          {"block", "pre-LN: x += attn(ln1(x)); x += fc2(act(fc(ln2(x))))"},
          {"position_embedding", "learned pos_emb [seq_len, width], added to tok_emb[ids]"},
          {"output", c.tied ? "tied: logits = ln_f(x)·tok_embᵀ" : "logits = ln_f(x)·out.weight"},
          {"input", "ids [B*T] batch-major; logits [B*T, vocab]"}};
}

// The constants of a ConvLM beyond its config.
json conv_constants(const json& model) {
  const ConvLMConfig c = ConvLMConfig::from_json(model);
  return {{"weight_orientation", "[in, out]: y = x·W + b; conv weight [nnz, kernel, bs, bs], tap t reads x[t·dilation − (kernel − 1)·dilation]"},
          {"layer_norm_eps", nn::LayerNormOptions(1).eps()},
          {"block", "x += gelu(edge(conv(ln(x)))): causal conv, dilation 2^(l mod dilation_cycle), weight norm per output channel"},
          {"edge_bias", "y·gain[e] + bias[e] at the first (kernel − 1)·dilation positions, grouped by padded taps"},
          {"receptive_field", c.receptive_field()},
          {"input", "ids [B*T] batch-major; logits [B*T, vocab]"}};
}

struct Registry {
  std::mutex mu;
  std::map<std::string, ModelType> types;
  Registry() {
    types["char_lstm"] = {[](const json& m) { return std::make_shared<CharLSTMLM>(CharLSTMLMConfig::from_json(m)); },
                          char_lstm_constants};
    types["transformer"] = {
        [](const json& m) { return std::make_shared<TransformerLM>(TransformerLMConfig::from_json(m)); },
        transformer_constants};
    types["conv_lm"] = {[](const json& m) { return std::make_shared<ConvLM>(ConvLMConfig::from_json(m)); },
                        conv_constants};
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

// The registered type `name`, or nullopt; `known` gets the registered names.
std::optional<ModelType> lookup(const std::string& name, std::string& known) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const auto& kv : r.types) known += (known.empty() ? "" : ", ") + kv.first;
  auto it = r.types.find(name);
  if (it == r.types.end()) return std::nullopt;
  return it->second;
}

// The model type of a config: model_type, else guessed from the model's fields (older files).
std::string type_of(const json& cfg, const std::string& path) {
  if (cfg.contains("model_type")) {
    TS_CHECK(cfg["model_type"].is_string(), IOError,
             "checkpoint '" << path << "': model_type is " << cfg["model_type"].dump() << ", not a string");
    return cfg["model_type"].get<std::string>();
  }
  const json& m = cfg["model"];
  if (m.contains("hidden")) return "char_lstm";
  if (m.contains("width")) return "transformer";
  TS_THROW(IOError, "checkpoint '" << path << "' has no model_type, and its model config has neither "
                                   << "\"hidden\" (CharLSTMLM) nor \"width\" (TransformerLM)");
}

}  // namespace

void register_model_type(const std::string& name, ModelType type) {
  TS_CHECK(!name.empty(), ValueError, "register_model_type: the name must not be empty");
  TS_CHECK(static_cast<bool>(type.build), ValueError, "register_model_type: '" << name << "' has no build function");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.types[name] = std::move(type);
}

std::vector<std::string> model_types() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& kv : r.types) names.push_back(kv.first);
  return names;
}

nlohmann::json checkpoint_config(const std::string& model_type, const nlohmann::json& model_config,
                                 const nlohmann::json& train) {
  std::string known;
  const std::optional<ModelType> t = lookup(model_type, known);
  TS_CHECK(t.has_value(), ValueError,
           "checkpoint_config: model_type \"" << model_type << "\" is not registered (registered: " << known << ")");
  json constants = t->constants ? t->constants(model_config) : json::object();
  return {{"model_type", model_type}, {"model", model_config}, {"constants", constants}, {"train", train}};
}

LoadedModel load_model(const std::string& path, Device device) {
  io::CheckpointParts parts;
  parts.optimizer = false;  // a model needs neither the optimizer state
  parts.trainer_tensors = false;  // nor the trainer's carried tensors
  io::CheckpointData ck = io::load_checkpoint(path, parts);  // IOError: missing, not HDF5, not a checkpoint
  LoadedModel m;
  m.config = json::parse(ck.config, nullptr, /*allow_exceptions=*/false);
  TS_CHECK(m.config.is_object() && m.config.contains("model") && m.config["model"].is_object(), IOError,
           "checkpoint '" << path << "' has no model config (root attribute config: {\"model\": {...}})");
  m.type = type_of(m.config, path);
  std::string known;
  const std::optional<ModelType> t = lookup(m.type, known);
  TS_CHECK(t.has_value(), IOError,
           "checkpoint '" << path << "': model_type \"" << m.type << "\" is not registered (registered: " << known
                          << "; a program registers its own with models::register_model_type)");
  m.step = ck.trainer.step;
  m.has_vocab = !ck.trainer.vocabulary.empty();
  if (m.has_vocab) m.vocab = data::Vocabulary::from_bytes({ck.trainer.vocabulary.begin(), ck.trainer.vocabulary.end()});
  const json& model_cfg = m.config["model"];
  if (m.has_vocab && model_cfg.contains("vocab") && model_cfg["vocab"].is_number_integer())
    TS_CHECK(model_cfg["vocab"].get<int64_t>() == m.vocab.size(), ValueError,
             "checkpoint '" << path << "': the model has " << model_cfg["vocab"].get<int64_t>()
                            << " tokens but the vocabulary " << m.vocab.size());
  m.module = t->build(model_cfg);
  TS_CHECK(m.module != nullptr, ValueError, "checkpoint '" << path << "': model_type '" << m.type << "' built no model");
  io::restore(std::move(ck), path, *m.module, nullptr, /*adopt_layouts=*/true);  // checks, then copies
  m.module->eval();  // no dropout
  if (device != Device::cpu()) m.module->to(device);
  return m;
}

}  // namespace models
}  // namespace tessera
