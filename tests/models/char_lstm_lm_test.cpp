#include "models/char_lstm_lm.h"

#include <gtest/gtest.h>

#include "core/graph/compile.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "optim/sgd.h"

namespace tessera {
namespace {

using models::CharLSTMLM;
using models::CharLSTMLMConfig;
using testing::all_close;
using testing::expect_error;

CharLSTMLMConfig parse(const std::string& s) { return CharLSTMLMConfig::from_json(nlohmann::json::parse(s)); }

// Token ids i32 [T, B] in [0, vocab), fixed by the seed.
Tensor random_ids(int64_t T, int64_t B, int64_t vocab, uint64_t seed) {
  Generator gen(seed);
  return cast(mul(uniform({T, B}, 0.0, 1.0 - 1e-9, gen, DType::f64), static_cast<double>(vocab)), DType::i32);
}

TEST(CharLSTMLM, ConfigJsonRoundTrip) {
  CharLSTMLMConfig c = parse(R"({"vocab": 30, "embed": 16, "hidden": 32, "layers": 2, "block_size": 8,
      "density": 0.5, "layout": "ws", "multiplicative": true, "layer_norm": true, "forget_bias": 0.5,
      "final_norm": "sparse", "norm_segments": 4, "seed": 9})");
  EXPECT_EQ(c.hidden, 32);
  EXPECT_EQ(c.layout, "ws");
  EXPECT_TRUE(c.multiplicative);
  EXPECT_EQ(c.norm_segments, 4);
  const nlohmann::json j = c.to_json();
  EXPECT_EQ(CharLSTMLMConfig::from_json(j).to_json(), j);
  EXPECT_EQ(CharLSTMLMConfig::from_json(nlohmann::json::object()).to_json(), CharLSTMLMConfig().to_json());
}

TEST(CharLSTMLM, RecomputeChunkReachesTheLayers) {
  // Optional (configs written before it load with 0: off); passed to every LSTM layer.
  EXPECT_EQ(parse("{}").recompute_chunk, 0);
  const CharLSTMLM m(parse(R"({"vocab": 12, "embed": 8, "hidden": 8, "layers": 2, "recompute_chunk": 3})"));
  for (size_t l = 0; l < 2; ++l) EXPECT_EQ(m.layer(l).options().recompute_chunk(), 3);
}

TEST(CharLSTMLM, BadFieldsNameTheField) {
  auto bad = [](const std::string& s, const std::string& field) {
    expect_error<ValueError>([&] { parse(s); }, {"CharLSTMLM config", "\"" + field + "\""});
  };
  bad(R"({"hidden": -3})", "hidden");
  bad(R"({"layers": 0})", "layers");
  bad(R"({"layers": "2"})", "layers");
  bad(R"({"hiden": 3})", "hiden");
  bad(R"({"layout": "foo", "block_size": 8})", "layout");
  bad(R"({"layout": "random", "density": 0.5})", "layout");
  bad(R"({"density": 0.5})", "density");
  bad(R"({"density": 1.5, "block_size": 8, "layout": "random"})", "density");
  bad(R"({"block_size": 12})", "block_size");
  bad(R"({"embed": 20, "block_size": 8})", "embed");
  bad(R"({"final_norm": "batch"})", "final_norm");
  bad(R"({"final_norm": "sparse", "norm_segments": 3})", "norm_segments");
  bad(R"({"seed": -1})", "seed");
  bad(R"({"recompute_chunk": -1})", "recompute_chunk");
  CharLSTMLMConfig c;
  c.vocab = 0;
  expect_error<ValueError>([&] { CharLSTMLM m(c); }, {"\"vocab\""});
}

// The cuDNN switch: an optional field (older configs load with false) that reaches every layer,
// refused with anything but a plain dense LSTM, and the same model: the same parameters (names,
// shapes, values from the same seed), losses and gradients as the per-step path (on the CPU the
// op's reference kernel), also with a carried state.
TEST(CharLSTMLM, CudnnSwitchRunsTheSameModel) {
  EXPECT_FALSE(parse("{}").cudnn);
  const std::string base = R"("vocab": 11, "embed": 8, "hidden": 12, "layers": 2, "seed": 5)";
  CharLSTMLM plain(parse("{" + base + "}")), fused(parse("{" + base + R"(, "cudnn": true})"));
  for (size_t l = 0; l < 2; ++l) EXPECT_TRUE(fused.layer(l).options().cudnn());
  const auto pp = plain.named_parameters(), fp = fused.named_parameters();
  ASSERT_EQ(pp.size(), fp.size());
  for (size_t i = 0; i < pp.size(); ++i) {
    EXPECT_EQ(pp[i].name, fp[i].name);
    EXPECT_TRUE(all_close(pp[i].tensor, fp[i].tensor, 0, 0)) << pp[i].name;
  }
  const Tensor ids = random_ids(5, 3, 11, 1), targets = random_ids(5, 3, 11, 2);
  CharLSTMLM::Output a = plain.loss(ids, targets), b = fused.loss(ids, targets);
  EXPECT_NEAR(a.loss.item<double>(), b.loss.item<double>(), 1e-6);
  a.loss.backward();
  b.loss.backward();
  for (size_t i = 0; i < pp.size(); ++i)
    EXPECT_TRUE(all_close(fp[i].tensor.grad(), pp[i].tensor.grad(), 1e-5, 1e-6)) << pp[i].name;
  const CharLSTMLM::Output a2 = plain.loss(ids, targets, CharLSTMLM::detach(a.state));
  const CharLSTMLM::Output b2 = fused.loss(ids, targets, CharLSTMLM::detach(b.state));
  EXPECT_NEAR(a2.loss.item<double>(), b2.loss.item<double>(), 1e-6);
  auto bad = [](const std::string& s) {
    expect_error<ValueError>([&] { parse(s); }, {"CharLSTMLM config", "\"cudnn\""});
  };
  bad(R"({"cudnn": true, "block_size": 8, "layout": "random", "density": 0.5})");
  bad(R"({"cudnn": true, "multiplicative": true})");
  bad(R"({"cudnn": true, "layer_norm": true})");
  bad(R"({"cudnn": true, "recompute_chunk": 2})");
}

TEST(CharLSTMLM, DenseParameterCount) {
  CharLSTMLM m(parse(R"({"vocab": 20, "embed": 6, "hidden": 5, "layers": 2, "multiplicative": true,
      "layer_norm": true, "final_norm": "layer"})"));
  const int64_t V = 20, E = 6, H = 5;
  auto layer = [&](int64_t in) { return in * 4 * H + H * 4 * H + 4 * H + 2 * 4 * H + in * H + H * H; };
  EXPECT_EQ(m.num_parameters(), V * E + layer(E) + layer(H) + 2 * H + H * V + V);
  std::vector<std::string> names;
  for (const auto& p : m.named_parameters()) names.push_back(p.name);
  EXPECT_EQ(names.front(), "embed.weight");
  EXPECT_NE(std::find(names.begin(), names.end(), "lstm.1.wmh.weight"), names.end());
  EXPECT_EQ(names.back(), "out.bias");
}

TEST(CharLSTMLM, SparseParameterCountCountsStoredBlocks) {
  CharLSTMLM m(parse(R"({"vocab": 30, "embed": 16, "hidden": 32, "layers": 2, "block_size": 8,
      "density": 0.5, "layout": "random", "final_norm": "sparse", "norm_segments": 4})"));
  const int64_t V = 30, E = 16, H = 32, bs = 8, N = H / bs;
  // random_layout keeps max(columns, round(density · rows · columns)) blocks per gate.
  auto nnz = [&](int64_t in) { return std::max<int64_t>(N, std::llround(0.5 * (in / bs) * N)); };
  EXPECT_EQ(m.layer(0).input_layout()->nnz(), nnz(E));
  EXPECT_EQ(m.layer(1).input_layout()->nnz(), nnz(H));
  EXPECT_EQ(m.layer(0).recurrent_layout()->nnz(), nnz(H));
  auto layer = [&](int64_t in) { return 4 * (nnz(in) + nnz(H)) * bs * bs + 4 * H; };
  EXPECT_EQ(m.num_parameters(), V * E + layer(E) + layer(H) + 2 * H + H * V + V);
  EXPECT_LT(m.num_parameters(), V * E + 2 * (E + 2 * H) * 4 * H);  // fewer than dense
}

TEST(CharLSTMLM, GraphLayoutsBuildAndRun) {
  for (const char* kind : {"ba", "ws", "balanced", "dense"}) {
    const std::string d = std::string(kind) == "dense" ? "1.0" : "0.4";
    CharLSTMLM m(
        parse(std::string(R"({"vocab": 11, "embed": 16, "hidden": 40, "block_size": 8, "layout": ")") + kind +
              R"(", "density": )" + d + "}"));
    EXPECT_EQ(m.layer(0).recurrent_layout()->block_rows(), 5) << kind;
    CharLSTMLM::Output o = m.forward(random_ids(3, 2, 11, 1));
    EXPECT_EQ(o.logits.shape(), Shape({6, 11})) << kind;
    EXPECT_EQ(o.state.size(), 1u);
  }
}

TEST(CharLSTMLM, SgdStepsReduceTheLossAndStateCarries) {
  CharLSTMLM m(parse(R"({"vocab": 17, "embed": 8, "hidden": 16, "layers": 2, "block_size": 8,
      "density": 0.5, "layout": "random", "multiplicative": true, "final_norm": "layer", "seed": 3})"));
  Tensor ids = random_ids(6, 4, 17, 5), targets = random_ids(6, 4, 17, 6);
  optim::SGD opt(m.parameters(), optim::SGDOptions(0.5));
  double first = 0, last = 0;
  for (int s = 0; s < 8; ++s) {
    CharLSTMLM::Output o = m.loss(ids, targets);
    (s == 0 ? first : last) = o.loss.item<double>();
    o.loss.backward();
    opt.step();
    opt.zero_grad();
  }
  EXPECT_LT(last, first - 0.1);
  // [T*B] ids with a carried state: the same logits as [T, B] ids split into two halves.
  CharLSTMLM::Output full = m.forward(ids);
  std::vector<Tensor> halves = chunk(ids, 2, 0);
  CharLSTMLM::Output a = m.forward(reshape(halves[0], {-1}), {}, 4);
  CharLSTMLM::Output b = m.forward(reshape(halves[1], {-1}), CharLSTMLM::detach(a.state));
  EXPECT_FALSE(CharLSTMLM::detach(a.state)[1].h.requires_grad());
  EXPECT_TRUE(all_close(concat({a.logits, b.logits}, 0), full.logits, 1e-5, 1e-6));
}

TEST(CharLSTMLM, CompiledStepMatchesEager) {
  const std::string cfg = R"({"vocab": 13, "embed": 8, "hidden": 16, "block_size": 8, "density": 0.5,
      "layout": "random", "multiplicative": true, "layer_norm": true, "final_norm": "sparse",
      "norm_segments": 2, "seed": 4})";
  CharLSTMLM eager(parse(cfg)), traced(parse(cfg));
  Tensor ids = random_ids(5, 3, 13, 7), targets = random_ids(5, 3, 13, 8);
  optim::SGD opt_e(eager.parameters(), optim::SGDOptions(0.3)),
      opt_t(traced.parameters(), optim::SGDOptions(0.3));
  CharLSTMLM::Output o = eager.loss(ids, targets);
  o.loss.backward();
  opt_e.step();
  auto loss_fn = [&](const std::map<std::string, Tensor>& in) {
    return traced.loss(in.at("ids"), in.at("targets")).loss;
  };
  CompiledStep step =
      compile(loss_fn, traced.named_parameters(), &opt_t, {{"ids", ids}, {"targets", targets}});
  EXPECT_EQ(step.run({{"ids", ids}, {"targets", targets}}), o.loss.item<double>());
  const auto pe = eager.named_parameters(), pt = traced.named_parameters();
  ASSERT_EQ(pe.size(), pt.size());
  for (size_t i = 0; i < pe.size(); ++i)
    EXPECT_TRUE(all_close(pt[i].tensor, pe[i].tensor, 0, 0)) << pe[i].name;
}

}  // namespace
}  // namespace tessera
