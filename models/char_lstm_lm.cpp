#include "models/char_lstm_lm.h"

#include <algorithm>
#include <cmath>

#include "core/sparse/generators.h"
#include "kernels/ops.h"
#include "models/config_reader.h"

namespace tessera {
namespace models {

namespace {

const std::vector<std::string> kLayouts = {"dense", "random", "ba", "ws", "balanced"};
const std::vector<std::string> kNorms = {"none", "layer", "sparse"};

bool one_of(const std::string& v, const std::vector<std::string>& set) {
  return std::find(set.begin(), set.end(), v) != set.end();
}

// The checks every config goes through, on a reader over its JSON (messages name the field).
void check_fields(const CharLSTMLMConfig& c, ConfigReader& r) {
  r.check(c.vocab > 0, "vocab", "must be positive");
  r.check(c.embed > 0, "embed", "must be positive");
  r.check(c.hidden > 0, "hidden", "must be positive");
  r.check(c.layers > 0, "layers", "must be positive");
  r.check(c.block_size == 0 || BlockLayout::valid_block_size(c.block_size), "block_size",
          "must be 0 (dense), 8, 16, 32 or 64");
  r.check(c.density > 0 && c.density <= 1, "density", "must be in (0, 1]");
  r.check(one_of(c.layout, kLayouts), "layout",
          "must be \"dense\", \"random\", \"ba\", \"ws\" or \"balanced\"");
  r.check(c.layout == "dense" || c.block_size > 0, "layout", "a sparse layout needs block_size > 0");
  r.check(c.layout != "dense" || c.density == 1, "density", "must be 1 with layout \"dense\"");
  if (c.block_size > 0) {
    r.check(c.embed % c.block_size == 0, "embed",
            "must be a multiple of block_size " + std::to_string(c.block_size));
    r.check(c.hidden % c.block_size == 0, "hidden",
            "must be a multiple of block_size " + std::to_string(c.block_size));
  }
  r.check(std::isfinite(c.forget_bias), "forget_bias", "must be finite");
  r.check(one_of(c.final_norm, kNorms), "final_norm", "must be \"none\", \"layer\" or \"sparse\"");
  r.check(c.norm_segments >= 1 && c.hidden % c.norm_segments == 0, "norm_segments",
          "must be >= 1 and divide hidden " + std::to_string(c.hidden));
  r.check(c.recompute_chunk >= 0, "recompute_chunk", "must be >= 0 (0: off)");
  r.check(c.seed >= 0, "seed", "must be >= 0");
  if (c.cudnn) {
    r.check(c.block_size == 0, "cudnn", "runs dense LSTMs only (block_size must be 0)");
    r.check(!c.multiplicative, "cudnn", "runs plain LSTMs only (multiplicative must be false)");
    r.check(!c.layer_norm, "cudnn", "runs plain LSTMs only (layer_norm must be false)");
    r.check(c.recompute_chunk == 0, "cudnn", "cannot be combined with recompute_chunk > 0");
  }
}

// The per-gate layout [in, H] of one weight for the config's layout kind (see the header).
LayoutPtr make_layout(const CharLSTMLMConfig& c, int64_t in, uint64_t seed) {
  const int64_t bs = c.block_size, H = c.hidden, R = in / bs, N = H / bs;
  const double d = c.density;
  if (c.layout == "dense") return dense_layout(in, H, bs);
  if ((c.layout == "ba" || c.layout == "ws") && R == N && N >= 3) {
    if (c.layout == "ba") {
      const int64_t m = std::clamp<int64_t>(std::llround(d * N / 2), 1, N - 1);
      return barabasi_albert_layout(in, H, bs, m, seed);
    }
    int64_t k = 2 * std::llround(d * N / 2);
    k = std::clamp<int64_t>(k, 2, (N - 1) / 2 * 2);
    return watts_strogatz_layout(in, H, bs, k, 0.25, seed);
  }
  if (c.layout == "balanced") {
    const int64_t b = std::clamp<int64_t>(std::llround(d * R), 1, R);
    if (N * b % R == 0) return balanced_random_layout(in, H, bs, b, seed);
  }
  return random_layout(in, H, bs, d, seed);
}

}  // namespace

CharLSTMLMConfig CharLSTMLMConfig::from_json(const nlohmann::json& j) {
  ConfigReader r(j, "CharLSTMLM");
  CharLSTMLMConfig c;
  c.vocab = r.get<int64_t>("vocab", c.vocab);
  c.embed = r.get<int64_t>("embed", c.embed);
  c.hidden = r.get<int64_t>("hidden", c.hidden);
  c.layers = r.get<int64_t>("layers", c.layers);
  c.block_size = r.get<int64_t>("block_size", c.block_size);
  c.density = r.get<double>("density", c.density);
  c.layout = r.get<std::string>("layout", c.layout);
  c.multiplicative = r.get<bool>("multiplicative", c.multiplicative);
  c.layer_norm = r.get<bool>("layer_norm", c.layer_norm);
  c.forget_bias = r.get<double>("forget_bias", c.forget_bias);
  c.final_norm = r.get<std::string>("final_norm", c.final_norm);
  c.norm_segments = r.get<int64_t>("norm_segments", c.norm_segments);
  c.recompute_chunk = r.get<int64_t>("recompute_chunk", c.recompute_chunk);  // absent in older configs: 0
  c.seed = r.get<int64_t>("seed", c.seed);
  c.cudnn = r.get<bool>("cudnn", c.cudnn);  // absent in older configs: false
  check_fields(c, r);
  r.finish();
  return c;
}

nlohmann::json CharLSTMLMConfig::to_json() const {
  return {{"vocab", vocab},
          {"embed", embed},
          {"hidden", hidden},
          {"layers", layers},
          {"block_size", block_size},
          {"density", density},
          {"layout", layout},
          {"multiplicative", multiplicative},
          {"layer_norm", layer_norm},
          {"forget_bias", forget_bias},
          {"final_norm", final_norm},
          {"norm_segments", norm_segments},
          {"recompute_chunk", recompute_chunk},
          {"seed", seed},
          {"cudnn", cudnn}};
}

void CharLSTMLMConfig::validate() const {
  const nlohmann::json j = to_json();
  ConfigReader r(j, "CharLSTMLM");
  check_fields(*this, r);
}

namespace {
// A container whose children are the layers "0", "1", ... (parameter paths "lstm.0.wx.weight").
class Stack : public nn::Module {
 public:
  template <class M>
  void add(const std::string& name, std::shared_ptr<M> m) {
    register_module(name, std::move(m));
  }
};
}  // namespace

CharLSTMLM::CharLSTMLM(const CharLSTMLMConfig& config) : config_(config) {
  const CharLSTMLMConfig& c = config_;
  c.validate();
  Generator gen(static_cast<uint64_t>(c.seed));
  embed_ =
      register_module("embed", std::make_shared<nn::Embedding>(nn::EmbeddingOptions(c.vocab, c.embed), gen));
  auto stack = register_module("lstm", std::make_shared<Stack>());
  for (int64_t l = 0; l < c.layers; ++l) {
    const int64_t in = l == 0 ? c.embed : c.hidden;
    nn::LSTMOptions o = nn::LSTMOptions(in, c.hidden)
                            .forget_bias(c.forget_bias)
                            .layer_norm(c.layer_norm)
                            .multiplicative(c.multiplicative)
                            .block_size(c.block_size)
                            .recompute_chunk(c.recompute_chunk)
                            .cudnn(c.cudnn);
    if (c.block_size > 0) {
      const uint64_t s = 1000 * static_cast<uint64_t>(c.seed) + 2 * static_cast<uint64_t>(l);
      o.input_layout(make_layout(c, in, s)).recurrent_layout(make_layout(c, c.hidden, s + 1));
    }
    lstm_.push_back(std::make_shared<nn::LSTM>(o, gen));
    stack->add(std::to_string(l), lstm_.back());
  }
  if (c.final_norm == "layer")
    norm_ = register_module("norm", std::make_shared<nn::LayerNorm>(nn::LayerNormOptions(c.hidden)));
  if (c.final_norm == "sparse")
    sparse_norm_ = register_module(
        "norm", std::make_shared<nn::SparseLayerNorm>(nn::SparseLayerNormOptions(c.hidden, c.norm_segments)));
  out_ = register_module("out", std::make_shared<nn::Linear>(nn::LinearOptions(c.hidden, c.vocab), gen));
}

CharLSTMLM::Output CharLSTMLM::forward(const Tensor& ids, const State& state, int64_t batch) const {
  TS_CHECK(ids.dim() == 1 || ids.dim() == 2, ShapeError,
           "CharLSTMLM: ids " << ids.meta() << " must be [T, B] or [T*B]");
  TS_CHECK(state.empty() || state.size() == lstm_.size(), ValueError,
           "CharLSTMLM: state has " << state.size() << " layers, the model " << lstm_.size());
  Output out;
  Tensor h = embed_->forward(ids);  // [T, B, E] or [T*B, E]
  if (h.dim() == 2 && batch == 0 && !state.empty()) batch = state[0].h.size(0);
  for (size_t l = 0; l < lstm_.size(); ++l) {
    nn::LSTMOutput o = lstm_[l]->forward(h, state.empty() ? nn::LSTMState{} : state[l], batch);
    if (batch == 0) batch = o.state.h.size(0);  // the layers above get [T*B, H]
    h = o.output;
    out.state.push_back(o.state);
  }
  if (norm_) h = norm_->forward(h);
  if (sparse_norm_) h = sparse_norm_->forward(h);
  out.logits = out_->forward(h);  // [T*B, vocab]
  return out;
}

CharLSTMLM::Output CharLSTMLM::loss(const Tensor& ids, const Tensor& targets, const State& state,
                                    int64_t batch) const {
  TS_CHECK(targets.numel() == ids.numel(), ShapeError,
           "CharLSTMLM: targets " << targets.meta() << " must have as many elements as ids " << ids.meta());
  Output out = forward(ids, state, batch);
  out.loss = cross_entropy(out.logits, targets.dim() == 1 ? targets : reshape(targets, {-1}));
  return out;
}

CharLSTMLM::State CharLSTMLM::detach(const State& s) {
  State d;
  for (const nn::LSTMState& l : s) d.push_back(l.detach());
  return d;
}

}  // namespace models
}  // namespace tessera
