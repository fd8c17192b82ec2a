// models::TransformerLM: config JSON (round trip, errors naming the field), parameter counts
// against closed formulas (dense and block-sparse, tied and untied), training on a fixed batch,
// compiled AdamW steps equal to eager ones, recompute regions (same loss, smaller arena); under
// autocast, loss and gradients bitwise those of the model with explicit casts before its products.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/graph/compile.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "models/models.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using models::TransformerLM;
using models::TransformerLMConfig;
using nlohmann::json;
using testing::expect_error;

TransformerLMConfig small_config() {
  TransformerLMConfig c;
  c.vocab = 13;
  c.seq_len = 16;
  c.width = 16;
  c.layers = 2;
  c.heads = 2;
  c.mlp_ratio = 2;
  c.attn_block = 8;
  c.seed = 5;
  return c;
}

// Token ids i32 [n] in [0, vocab) and the next-token targets of the same stream.
std::pair<Tensor, Tensor> batch_of(int64_t n, int64_t vocab) {
  std::vector<int32_t> stream(static_cast<size_t>(n + 1));
  for (int64_t i = 0; i <= n; ++i) stream[i] = static_cast<int32_t>((i * 7 + i * i / 3 + 2) % vocab);
  std::vector<int32_t> ids(stream.begin(), stream.end() - 1), targets(stream.begin() + 1, stream.end());
  return {from_vector(ids, {n}), from_vector(targets, {n})};
}

TEST(TransformerLMConfig, JsonRoundTrip) {
  const json j =
      json::parse(R"({"vocab": 300, "seq_len": 64, "width": 48, "layers": 3, "heads": 6, "mlp_ratio": 3,
      "activation": "gelu_tanh", "attn_block": 16, "attn_layout": "fixed", "window": 2, "stride": 2, "summary": 1,
      "linear_block": 16, "density": 0.25, "tied": false, "dropout": 0.1, "attention_dropout": 0.0, "qk_norm": true,
      "attn_impl": "auto", "recompute": true, "seed": 9})");
  TransformerLMConfig c = TransformerLMConfig::from_json(j);
  EXPECT_EQ(c.vocab, 300);
  EXPECT_EQ(c.heads, 6);
  EXPECT_EQ(c.attn_layout, "fixed");
  EXPECT_EQ(c.density, 0.25);
  EXPECT_FALSE(c.tied);
  EXPECT_TRUE(c.recompute);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.to_json(), j);
  EXPECT_EQ(TransformerLMConfig::from_json(c.to_json()).to_json(), j);
  // attention_dropout round-trips (dense layout); a config without it reads as 0.
  json jd = TransformerLMConfig::from_json(json{{"vocab", 7}}).to_json();
  EXPECT_EQ(jd.at("attention_dropout"), 0.0);
  jd["attention_dropout"] = 0.2;
  EXPECT_EQ(TransformerLMConfig::from_json(jd).attention_dropout, 0.2);
  EXPECT_EQ(TransformerLMConfig::from_json(jd).to_json(), jd);
  // A config written before qk_norm existed reads as without it.
  EXPECT_EQ(jd.at("qk_norm"), false);
  jd.erase("qk_norm");
  EXPECT_FALSE(TransformerLMConfig::from_json(jd).qk_norm);
  // Defaults fill everything but vocab.
  TransformerLMConfig d = TransformerLMConfig::from_json(json{{"vocab", 256}});
  EXPECT_EQ(d.to_json(), [] {
    TransformerLMConfig e;
    e.vocab = 256;
    return e.to_json();
  }());
}

TEST(TransformerLMConfig, ErrorsNameTheField) {
  auto with = [](const json& patch) {
    json j = small_config().to_json();
    j.merge_patch(patch);
    return j;
  };
  auto expect_bad = [&](const json& patch, std::vector<std::string> words) {
    SCOPED_TRACE(patch.dump());
    words.insert(words.begin(), "TransformerLM config");
    expect_error<ValueError>([&] { TransformerLMConfig::from_json(with(patch)); }, words);
  };
  expect_bad({{"width", 18}, {"heads", 4}}, {"\"width\"", "multiple of heads=4", "18"});
  expect_bad({{"seq_len", 20}}, {"\"seq_len\"", "attn_block=8", "20"});
  expect_bad({{"layers", 0}}, {"\"layers\"", "positive"});
  expect_bad({{"layers", "2"}}, {"\"layers\"", "wrong type"});
  expect_bad({{"widht", 16}}, {"unknown field", "\"widht\""});
  expect_bad({{"activation", "swish"}}, {"\"activation\"", "swish"});
  expect_bad({{"attn_layout", "banded"}}, {"\"attn_layout\"", "banded"});
  expect_bad({{"attn_block", 12}}, {"\"attn_block\"", "8, 16, 32, 64 or 128"});
  expect_bad({{"linear_block", 32}}, {"\"linear_block\"", "divide width=16"});
  expect_bad({{"density", 0.5}}, {"\"density\"", "linear_block > 0"});
  expect_bad({{"linear_block", 8}, {"density", 1.5}}, {"\"density\"", "(0, 1]"});
  expect_bad({{"dropout", 1.0}}, {"\"dropout\"", "[0, 1)"});
  expect_bad({{"attention_dropout", -0.1}}, {"\"attention_dropout\"", "[0, 1)"});
  expect_bad({{"attn_impl", "flash"}}, {"\"attn_impl\"", "auto", "dense"});
  expect_bad({{"attn_impl", "dense"}, {"attn_layout", "local"}}, {"\"attn_impl\"", "attn_layout", "local"});
  expect_bad({{"stride", 2}, {"summary", 3}}, {"\"summary\"", "stride=2"});
  expect_bad({{"seed", -1}}, {"\"seed\"", ">= 0"});
  expect_error<ValueError>(
      [] {
        TransformerLMConfig::from_json(json{{"width", 16}});
      },
      {"\"vocab\"", "required"});
  // The constructor validates the same way.
  TransformerLMConfig c = small_config();
  c.heads = 3;
  expect_error<ValueError>([&] { TransformerLM m(c); }, {"\"width\"", "heads=3"});
}

// Parameters of the model by formula: V·C tok_emb + T·C pos_emb + per layer (2C ln1 + qkv + proj +
// 2C ln2 + fc + fc2) + 2C ln_f (+ C·V untied output). A projection in→out: dense in·out + out;
// block-sparse nnz·bs² + out with nnz = max(Q, round(d·R·Q)), R = in/bs, Q = out/bs.
int64_t expected_parameters(const TransformerLMConfig& c) {
  const int64_t V = c.vocab, T = c.seq_len, C = c.width, M = c.mlp_ratio * c.width;
  auto proj = [&](int64_t in, int64_t out) -> int64_t {
    if (c.linear_block == 0) return in * out + out;
    const int64_t bs = c.linear_block, R = in / bs, Q = out / bs;
    const int64_t nnz = std::min(R * Q, std::max(Q, static_cast<int64_t>(std::llround(c.density * R * Q))));
    return nnz * bs * bs + out;
  };
  const int64_t layer = 2 * C + proj(C, 3 * C) + proj(C, C) + 2 * C + proj(C, M) + proj(M, C);
  return V * C + T * C + c.layers * layer + 2 * C + (c.tied ? 0 : C * V);
}

TEST(TransformerLM, ParameterCounts) {
  for (bool tied : {true, false}) {
    for (int64_t lb : {0, 8}) {
      TransformerLMConfig c = small_config();
      c.tied = tied;
      c.linear_block = lb;
      c.width = 32;
      c.heads = 4;
      if (lb) c.density = 0.3;
      SCOPED_TRACE(c.to_json().dump());
      TransformerLM m(c);
      EXPECT_EQ(m.num_parameters(), expected_parameters(c));
      if (lb) {
        EXPECT_LT(m.num_parameters(), expected_parameters(small_config()) + 10 * 32 * 32);
      }
    }
  }
  TransformerLMConfig c = small_config();
  c.tied = false;
  TransformerLM m(c);
  std::vector<std::string> names;
  for (const auto& p : m.named_parameters()) names.push_back(p.name);
  EXPECT_EQ(names[0], "pos_emb");  // a module's own parameters come before its submodules'
  EXPECT_EQ(names[1], "tok_emb.weight");
  EXPECT_EQ(names[2], "blocks.0.ln1.gamma");
  EXPECT_NE(std::find(names.begin(), names.end(), "blocks.1.attn.qkv.weight"), names.end());
  EXPECT_EQ(names.back(), "out.weight");
  EXPECT_EQ(names.size(), 2 + 2 * 12 + 2 + 1u);
}

TEST(TransformerLM, LogitsShapeAndErrors) {
  TransformerLMConfig c = small_config();
  c.attn_layout = "local";
  c.window = 1;
  TransformerLM m(c);
  auto [ids, targets] = batch_of(3 * 16, c.vocab);
  EXPECT_EQ(m.logits(ids, 3).shape(), Shape({48, 13}));
  EXPECT_EQ(m.loss(ids, targets, 3).numel(), 1);
  EXPECT_EQ(*m.attention_layout(), *AttentionLayout::local_window(16, 8, 2, 1));
  expect_error<ShapeError>([&] { m.logits(ids, 2); }, {"TransformerLM", "2*16"});
}

TEST(TransformerLM, AttentionDropoutReachesEveryBlock) {
  TransformerLMConfig c = small_config();
  c.attention_dropout = 0.2;
  TransformerLM m(c);
  for (int64_t l = 0; l < c.layers; ++l) {
    EXPECT_EQ(m.block(l).attention().options().attention_dropout(), 0.2) << "block " << l;
    EXPECT_FALSE(m.block(l).attention().uses_dense_path(Device::cpu())) << "block " << l << ": inside block_attention";
  }
  auto [ids, targets] = batch_of(2 * c.seq_len, c.vocab);
  Generator g1(4), g2(4);
  const float a = m.loss(ids, targets, 2, g1).item<float>(), b = m.loss(ids, targets, 2, g1).item<float>();
  EXPECT_NE(a, b) << "a new mask each call";
  EXPECT_EQ(m.loss(ids, targets, 2, g2).item<float>(), a) << "same generator state, same mask";
  m.eval();
  EXPECT_EQ(m.loss(ids, targets, 2, g1).item<float>(), m.loss(ids, targets, 2, g2).item<float>());
}

TEST(TransformerLM, SgdStepsReduceTheLoss) {
  for (const char* layout : {"dense", "local"}) {
    TransformerLMConfig c = small_config();
    c.attn_layout = layout;
    c.window = 1;  // local: each block of 8 tokens sees only itself
    c.linear_block = 8;
    c.density = 0.5;
    SCOPED_TRACE(layout);
    TransformerLM m(c);
    auto [ids, targets] = batch_of(2 * 16, c.vocab);
    optim::SGD opt(m.parameters(), optim::SGDOptions(0.1).momentum(0.9));
    double first = 0, last = 0;
    for (int step = 0; step < 12; ++step) {
      Tensor loss = m.loss(ids, targets, 2);
      (step == 0 ? first : last) = loss.item<float>();
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    EXPECT_LT(last, 0.85 * first) << first << " -> " << last;
  }
}

TEST(TransformerLM, CompiledAdamWMatchesEager) {
  for (bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    TransformerLMConfig c = small_config();
    c.tied = tied;
    c.seq_len = 32;
    c.attn_layout = "fixed";  // 4 blocks of 8 tokens, stride 2 blocks: a sparse layout
    c.stride = 2;
    c.linear_block = 8;
    c.density = 0.5;
    TransformerLM eager(c), graph(c);
    ASSERT_LT(eager.attention_layout()->density(), 1.0);
    auto [ids, targets] = batch_of(2 * 32, c.vocab);
    const optim::AdamWOptions o = optim::AdamWOptions(1e-2).weight_decay(0.1);
    optim::AdamW eager_opt(eager.parameters(), o), graph_opt(graph.parameters(), o);
    auto loss_fn = [&](const std::map<std::string, Tensor>& in) {
      return graph.loss(in.at("x"), in.at("y"), 2);
    };
    CompiledStep step = compile(loss_fn, graph.named_parameters(), &graph_opt, {{"x", ids}, {"y", targets}});
    for (int s = 0; s < 2; ++s) {
      Tensor loss = eager.loss(ids, targets, 2);
      eager_opt.zero_grad();
      loss.backward();
      eager_opt.step();
      EXPECT_EQ(step.run({{"x", ids}, {"y", targets}}), static_cast<double>(loss.item<float>()))
          << "step " << s;
    }
    std::vector<nn::NamedParam> pe = eager.named_parameters(), pg = graph.named_parameters();
    ASSERT_EQ(pe.size(), pg.size());
    for (size_t i = 0; i < pe.size(); ++i)
      EXPECT_EQ(pe[i].tensor.to_vector<float>(), pg[i].tensor.to_vector<float>()) << pe[i].name;
  }
}

TEST(TransformerLM, RecomputeSameLossSmallerArena) {
  TransformerLMConfig c = small_config();
  c.layers = 3;
  c.seq_len = 32;
  c.width = 32;
  c.heads = 4;
  TransformerLMConfig rc = c;
  rc.recompute = true;
  TransformerLM plain(c), recomputed(rc);
  auto [ids, targets] = batch_of(4 * 32, c.vocab);
  auto fn = [&](const TransformerLM& m) {
    return [&m](const std::map<std::string, Tensor>& in) { return m.loss(in.at("x"), in.at("y"), 4); };
  };
  CompiledStep a = compile(fn(plain), plain.named_parameters(), nullptr, {{"x", ids}, {"y", targets}});
  CompiledStep b =
      compile(fn(recomputed), recomputed.named_parameters(), nullptr, {{"x", ids}, {"y", targets}});
  const double la = a.run({{"x", ids}, {"y", targets}}), lb = b.run({{"x", ids}, {"y", targets}});
  EXPECT_EQ(la, lb);
  EXPECT_EQ(la, static_cast<double>(
                    recomputed.loss(ids, targets, 4).item<float>()));  // eager: recompute is a no-op
  for (const auto& p : plain.named_parameters())
    EXPECT_TRUE(testing::all_close(b.fetch("grad/" + p.name), a.fetch("grad/" + p.name), 1e-6, 1e-7))
        << p.name;
  const size_t arena_plain = a.executor().plan().arena_bytes, arena_rc = b.executor().plan().arena_bytes;
  EXPECT_LT(arena_rc, arena_plain);
}

// The parameter `name` of m.
Tensor param_of(const nn::Module& m, const std::string& name) {
  for (const auto& p : m.named_parameters())
    if (p.name == name) return p.tensor;
  ADD_FAILURE() << "no parameter " << name;
  return Tensor();
}

// The child module `name` of m as a T.
template <class T>
std::shared_ptr<T> child_of(const nn::Module& m, const std::string& name) {
  for (const auto& c : m.named_children())
    if (c.first == name) return std::dynamic_pointer_cast<T>(c.second);
  return nullptr;
}

// TransformerLM::loss as it was before the layer norms (ln1, ln2, ln_f) and gelu wrote the
// autocast dtype: every one of them f32, cast by the product that reads it (no dropout).
Tensor loss_with_explicit_casts(const TransformerLM& m, const Tensor& ids, const Tensor& targets, int64_t B) {
  const TransformerLMConfig& c = m.config();
  const Tensor emb = param_of(m, "tok_emb.weight");
  Tensor x = reshape(add(reshape(embedding(emb, ids), {B, c.seq_len, c.width}), param_of(m, "pos_emb")),
                     {B * c.seq_len, c.width});
  for (int64_t l = 0; l < c.layers; ++l) {
    const nn::TransformerBlock& blk = m.block(l);
    const auto ln1 = child_of<nn::LayerNorm>(blk, "ln1"), ln2 = child_of<nn::LayerNorm>(blk, "ln2");
    Tensor h = add(x, blk.attention().forward(ln1->forward(x), B));
    const Tensor u = cast(blk.fc().forward(ln2->forward(h)), autocast::dtype());  // fc's f32 output rounded
    x = add(h, blk.fc2().forward(nn::apply_activation(blk.options().activation(), u)));
  }
  x = layer_norm(x, param_of(m, "ln_f.gamma"), param_of(m, "ln_f.beta"));
  const Tensor logits = c.tied ? matmul(x, emb, false, true) : matmul(x, param_of(m, "out.weight"));
  return cross_entropy(logits, targets);
}

TEST(TransformerLM, AutocastLossAndGradientsEqualThoseWithExplicitCasts) {
  for (DType low : {DType::bf16, DType::f16})
    for (const char* act : {"gelu", "gelu_tanh", "fast_gelu"})
      for (bool tied : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(low)) + " " + act + (tied ? " tied" : " untied"));
        TransformerLMConfig c = small_config();
        c.activation = act;
        c.tied = tied;
        c.linear_block = tied ? 0 : 8;  // dense and block-sparse weights
        c.density = tied ? 1.0 : 0.5;
        TransformerLM now(c), before(c);
        auto [ids, targets] = batch_of(2 * c.seq_len, c.vocab);
        Tensor l1, l2;
        {
          autocast::Guard amp(low);
          l1 = now.loss(ids, targets, 2);
        }
        {
          autocast::Guard amp(low);
          l2 = loss_with_explicit_casts(before, ids, targets, 2);
        }
        ASSERT_EQ(l1.dtype(), DType::f32);
        EXPECT_EQ(l1.item<float>(), l2.item<float>());
        l1.backward();
        l2.backward();
        const std::vector<nn::NamedParam> p1 = now.named_parameters(), p2 = before.named_parameters();
        ASSERT_EQ(p1.size(), p2.size());
        for (size_t i = 0; i < p1.size(); ++i) {
          ASSERT_TRUE(p1[i].tensor.grad().defined() && p2[i].tensor.grad().defined()) << p1[i].name;
          EXPECT_EQ(p1[i].tensor.grad().to_vector<float>(), p2[i].tensor.grad().to_vector<float>()) << p1[i].name;
        }
      }
}

// Compiled under autocast (the narrowed layer norms and gelu traced into the step), with and
// without recompute regions: the eager autocast loss, bit for bit.
TEST(TransformerLM, CompiledAutocastStepMatchesEager) {
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recompute" : "plain");
    TransformerLMConfig c = small_config();
    c.activation = "gelu_tanh";
    c.recompute = recompute;
    TransformerLM eager(c), graph(c);
    auto [ids, targets] = batch_of(2 * c.seq_len, c.vocab);
    auto loss_fn = [&](const std::map<std::string, Tensor>& in) {
      autocast::Guard amp(DType::bf16);
      return graph.loss(in.at("x"), in.at("y"), 2);
    };
    CompiledStep step = compile(loss_fn, graph.named_parameters(), nullptr, {{"x", ids}, {"y", targets}});
    Tensor loss;
    {
      autocast::Guard amp(DType::bf16);
      loss = eager.loss(ids, targets, 2);
    }
    loss.backward();
    EXPECT_EQ(step.run({{"x", ids}, {"y", targets}}), static_cast<double>(loss.item<float>()));
    for (const auto& p : eager.named_parameters())
      EXPECT_EQ(step.fetch("grad/" + p.name).to_vector<float>(), p.tensor.grad().to_vector<float>()) << p.name;
  }
}

// Incremental decoding: the logits decode() gives for positions fed in chunks equal those of
// logits() over the whole window at the same positions (to rounding), for every layout kind,
// block-sparse weights included, two sequences at once.
TEST(TransformerLM, DecodeGivesTheLogitsOfTheFullWindow) {
  const int64_t B = 2;
  for (const char* layout : {"dense", "local", "strided", "fixed"}) {
    TransformerLMConfig c = small_config();
    c.seq_len = 32;
    c.attn_layout = layout;
    c.window = 2;
    c.stride = 2;
    if (std::string(layout) == "fixed") c.linear_block = 8, c.density = 0.5;
    TransformerLM model(c);
    model.eval();
    NoGradGuard no_grad;
    const Tensor ids = batch_of(B * c.seq_len, c.vocab).first;  // [B*T], batch-major
    const std::vector<float> full = model.logits(ids, B).to_vector<float>();  // [B*T, V]
    const std::vector<int32_t> all = ids.to_vector<int32_t>();
    TransformerLM::DecodeState state = model.start_decoding(B);
    int64_t at = 0;
    for (int64_t n : {5, 1, 1, 9, 16}) {
      std::vector<int32_t> chunk;  // [B*n]: positions at .. at+n-1 of each sequence
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < n; ++i) chunk.push_back(all[static_cast<size_t>(b * c.seq_len + at + i)]);
      const std::vector<float> got = model.decode(from_vector(chunk, {B * n}), n, state).to_vector<float>();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t v = 0; v < c.vocab; ++v) {
            const float want = full[static_cast<size_t>((b * c.seq_len + at + i) * c.vocab + v)];
            const float g = got[static_cast<size_t>((b * n + i) * c.vocab + v)];
            ASSERT_NEAR(g, want, 1e-4 * (1 + std::abs(want))) << layout << " position " << at + i << " sequence " << b;
          }
      at += n;
      EXPECT_EQ(state.len, at);
    }
  }
}

TEST(TransformerLM, DecodeErrors) {
  TransformerLMConfig c = small_config();
  c.dropout = 0.1;
  TransformerLM model(c);
  NoGradGuard no_grad;
  TransformerLM::DecodeState state = model.start_decoding(1);
  const Tensor one = from_vector(std::vector<int32_t>{3}, {1});
  expect_error<ValueError>([&] { model.decode(one, 1, state); }, {"eval()"});  // dropout in training mode
  model.eval();
  expect_error<ShapeError>([&] { model.decode(one, 2, state); }, {"[B*n]"});
  expect_error<ValueError>([&] { model.start_decoding(0); }, {"batch"});
  model.decode(from_vector(std::vector<int32_t>(16, 1), {16}), 16, state);  // the whole window
  expect_error<ValueError>([&] { model.decode(one, 1, state); }, {"pass seq_len 16"});
}

}  // namespace
}  // namespace tessera
