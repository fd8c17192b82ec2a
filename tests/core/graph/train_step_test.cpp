// Compiled training steps against eager training: same models, same seeds, same optimizer.
// The executor runs the same kernels in the same order as eager mode, so parameters and
// losses agree bitwise (tolerance 0) on CPU f32 after several steps.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <map>

#include "core/graph/compile.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using testing::all_close;
using Inputs = std::map<std::string, Tensor>;

Tensor init(const Shape& s, uint64_t seed, double std = 0.2) {
  Generator gen(seed);
  return normal(s, 0, std, gen).requires_grad_();
}

Tensor ids(int n, int vocab, int seed) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = (i * 13 + seed * 7 + i / 3) % vocab;
  return from_vector(v, {n});
}

// A model: named parameters and a loss over named inputs.
struct Model {
  std::vector<graph::NamedParam> params;
  std::function<Tensor(const Inputs&)> loss;
  std::vector<Tensor> tensors() const {
    std::vector<Tensor> t;
    for (const auto& p : params) t.push_back(p.tensor);
    return t;
  }
};

Model mlp() {
  Model m;
  Tensor w1 = init({10, 32}, 1), b1 = init({32}, 2), w2 = init({32, 6}, 3);
  m.params = {{"w1", w1}, {"b1", b1}, {"w2", w2}};
  m.loss = [=](const Inputs& in) {
    Tensor h = relu(add(matmul(in.at("x"), w1), b1));
    return cross_entropy(matmul(h, w2), in.at("y"));
  };
  return m;
}

// An LSTM unrolled over T steps with shared weights; the loss is cross-entropy of every step.
Model lstm(int T, int B, int V, int H) {
  Model m;
  Tensor emb = init({V, H}, 4), wx = init({H, 4 * H}, 5), wh = init({H, 4 * H}, 6), b = init({4 * H}, 7);
  Tensor wo = init({H, V}, 8);
  m.params = {{"emb", emb}, {"wx", wx}, {"wh", wh}, {"b", b}, {"wo", wo}};
  m.loss = [=](const Inputs& in) {
    Tensor x = embedding(emb, in.at("x"));  // [T*B, H]
    Tensor h = zeros({B, H}), c = zeros({B, H});
    std::vector<Tensor> hs;
    for (int t = 0; t < T; ++t) {
      Tensor gates = add(add(matmul(slice(x, 0, t * B, (t + 1) * B), wx), matmul(h, wh)), b);
      std::vector<Tensor> g = split(gates, {H, H, H, H}, 1);
      c = add(mul(sigmoid(g[1]), c), mul(sigmoid(g[0]), tanh(g[3])));
      h = mul(sigmoid(g[2]), tanh(c));
      hs.push_back(h);
    }
    return cross_entropy(matmul(concat(hs, 0), wo), in.at("y"));
  };
  return m;
}

// One pre-LN causal self-attention block with an MLP, on [B*T, C] activations.
Tensor attention_block(const Tensor& x, const std::vector<Tensor>& p, int B, int T, int C, int heads) {
  const int D = C / heads;
  Tensor h = layer_norm(x, p[0], p[1]);
  Tensor qkv = reshape(matmul(h, p[2]), {B, T, 3, heads, D});
  Tensor qkvh = permute(qkv, {2, 0, 3, 1, 4});  // [3, B, heads, T, D]
  std::vector<Tensor> parts = split(reshape(qkvh, {3, B * heads, T, D}), {1, 1, 1}, 0);
  Tensor q = reshape(parts[0], {B * heads, T, D}), k = reshape(parts[1], {B * heads, T, D});
  Tensor v = reshape(parts[2], {B * heads, T, D});
  std::vector<double> mask(T * T);
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < T; ++j) mask[i * T + j] = j <= i ? 0.0 : -1e9;
  Tensor scores = add(mul(matmul(q, k, false, true), 1.0 / std::sqrt(D)), from_vector(mask, {T, T}, DType::f32));
  Tensor att = matmul(softmax(scores), v);  // [B*heads, T, D]
  Tensor merged = reshape(permute(reshape(att, {B, heads, T, D}), {0, 2, 1, 3}), {B * T, C});
  Tensor y = add(x, matmul(merged, p[3]));
  Tensor m = matmul(gelu(matmul(layer_norm(y, p[4], p[5]), p[6])), p[7]);
  return add(y, m);
}

Model attention(int B, int T, int C, int heads, int V, bool use_recompute, int blocks = 1) {
  Model m;
  Tensor emb = init({V, C}, 9), wo = init({C, V}, 10);
  m.params = {{"emb", emb}, {"wo", wo}};
  std::vector<std::vector<Tensor>> ps;
  for (int l = 0; l < blocks; ++l) {
    const uint64_t s = 100 + 10 * l;
    std::vector<Tensor> p = {add(init({C}, s, 0.1), 1.0).detach().requires_grad_(), init({C}, s + 1, 0.1),
                             init({C, 3 * C}, s + 2), init({C, C}, s + 3),
                             add(init({C}, s + 4, 0.1), 1.0).detach().requires_grad_(), init({C}, s + 5, 0.1),
                             init({C, 4 * C}, s + 6), init({4 * C, C}, s + 7)};
    for (size_t i = 0; i < p.size(); ++i) m.params.push_back({"block" + std::to_string(l) + "." + std::to_string(i), p[i]});
    ps.push_back(p);
  }
  m.loss = [=](const Inputs& in) {
    Tensor x = embedding(emb, in.at("x"));
    for (const auto& p : ps)
      x = use_recompute ? graph::recompute([&] { return attention_block(x, p, B, T, C, heads); })
                        : attention_block(x, p, B, T, C, heads);
    return cross_entropy(matmul(x, wo), in.at("y"));
  };
  return m;
}

// Trains `steps` steps eagerly on one copy and compiled on another; everything must match.
template <class Opt, class Options>
void expect_same_training(const std::function<Model()>& make, const Options& options, const Inputs& batch,
                          int steps) {
  Model eager = make(), traced = make();
  Opt opt_eager(eager.tensors(), options), opt_traced(traced.tensors(), options);
  CompiledStep step = compile(traced.loss, traced.params, &opt_traced, batch);
  for (int s = 0; s < steps; ++s) {
    Tensor loss = eager.loss(batch);
    loss.backward();
    opt_eager.step();
    opt_eager.zero_grad();
    double compiled = step.run(batch);
    ASSERT_EQ(compiled, loss.item<double>()) << "loss differs at step " << s;
  }
  EXPECT_EQ(opt_traced.step_count(), steps);
  for (size_t i = 0; i < eager.params.size(); ++i)
    EXPECT_TRUE(all_close(traced.params[i].tensor, eager.params[i].tensor, 0, 0)) << eager.params[i].name;
  std::vector<Tensor> se = opt_eager.state(), st = opt_traced.state();
  for (size_t i = 0; i < se.size(); ++i) EXPECT_TRUE(all_close(st[i], se[i], 0, 0)) << "state " << i;
}

TEST(TrainStep, MlpWithAdamWMatchesEagerBitwise) {
  Inputs batch{{"x", testing::test_randn({17, 10}, 20, DType::f32)}, {"y", ids(17, 6, 1)}};
  expect_same_training<optim::AdamW>(mlp, optim::AdamWOptions(1e-2).weight_decay(0.1), batch, 6);
}

TEST(TrainStep, UnrolledLstmWithSgdMomentumMatchesEagerBitwise) {
  const int T = 5, B = 3, V = 11, H = 8;
  Inputs batch{{"x", ids(T * B, V, 2)}, {"y", ids(T * B, V, 3)}};
  expect_same_training<optim::SGD>([&] { return lstm(T, B, V, H); }, optim::SGDOptions(0.5).momentum(0.9), batch, 5);
}

TEST(TrainStep, AttentionBlockWithAdamWMatchesEagerBitwise) {
  const int B = 2, T = 6, C = 16, heads = 2, V = 13;
  Inputs batch{{"x", ids(B * T, V, 4)}, {"y", ids(B * T, V, 5)}};
  expect_same_training<optim::AdamW>([&] { return attention(B, T, C, heads, V, false); },
                                     optim::AdamWOptions(3e-3), batch, 4);
}

TEST(TrainStep, RecomputeGivesTheSameNumbersWithASmallerArena) {
  // Activations outweigh the parameters (as in real models): the arena's peak is in backward,
  // where recompute lowers it, not at the end, where a bucket of Adam updates keeps its gradients.
  const int B = 8, T = 32, C = 32, heads = 4, V = 17;
  Inputs batch{{"x", ids(B * T, V, 6)}, {"y", ids(B * T, V, 7)}};
  // Eager vs compiled with recompute regions: still bitwise equal.
  expect_same_training<optim::AdamW>([&] { return attention(B, T, C, heads, V, true, 3); },
                                     optim::AdamWOptions(3e-3), batch, 3);
  Model plain = attention(B, T, C, heads, V, false, 3), remat = attention(B, T, C, heads, V, true, 3);
  optim::AdamW o1(plain.tensors()), o2(remat.tensors());
  CompiledStep s1 = compile(plain.loss, plain.params, &o1, batch), s2 = compile(remat.loss, remat.params, &o2, batch);
  const graph::MemoryPlan &p1 = s1.executor().plan(), &p2 = s2.executor().plan();
  EXPECT_LT(p2.arena_bytes, p1.arena_bytes) << s1.summary() << s2.summary();
  EXPECT_NE(s2.summary().find("recompute"), std::string::npos);
  EXPECT_EQ(s1.run(batch), s2.run(batch));
}

TEST(TrainStep, OptimizerResultsAreWrittenInPlace) {
  Model m = mlp();
  optim::AdamW opt(m.tensors());
  Inputs batch{{"x", testing::test_randn({4, 10}, 21, DType::f32)}, {"y", ids(4, 6, 8)}};
  CompiledStep step = compile(m.loss, m.params, &opt, batch);
  const graph::MemoryPlan& p = step.executor().plan();
  EXPECT_EQ(p.bound_writes, 9) << p.summary();  // p, m, v for each of the 3 parameters
  EXPECT_TRUE(p.copies.empty());
  const void* before = m.params[0].tensor.data_ptr();
  step.run(batch);
  EXPECT_EQ(m.params[0].tensor.data_ptr(), before) << "parameters keep their storage";
}

TEST(TrainStep, LearningRateChangesNeedNoRetrace) {
  Model a = mlp(), b = mlp();
  optim::SGD oa(a.tensors(), optim::SGDOptions(0.1)), ob(b.tensors(), optim::SGDOptions(0.1));
  Inputs batch{{"x", testing::test_randn({5, 10}, 22, DType::f32)}, {"y", ids(5, 6, 9)}};
  CompiledStep step = compile(b.loss, b.params, &ob, batch);
  for (double lr : {0.1, 0.05, 0.0, 0.2}) {
    oa.set_lr(lr);
    ob.set_lr(lr);
    Tensor l = a.loss(batch);
    l.backward();
    oa.step();
    oa.zero_grad();
    EXPECT_EQ(step.run(batch), l.item<double>());
  }
  EXPECT_EQ(step.cached_plans(), 1u);
  for (size_t i = 0; i < a.params.size(); ++i) EXPECT_TRUE(all_close(b.params[i].tensor, a.params[i].tensor, 0, 0));
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// CompiledStep::profile is a step like run(): the same losses and updates as a twin that only
// runs (a profiled step between plain ones, replays before and after), and its breakdown counts
// every node the plan runs once, under the op's name, with times that are not negative and whose
// sum is within the step's wall time.
TEST(TrainStep, ProfileIsAStepTimedByOp) {
  const int B = 2, T = 6, C = 16, heads = 2, V = 13;
  Inputs batch{{"x", ids(B * T, V, 4)}, {"y", ids(B * T, V, 5)}};
  Model a = attention(B, T, C, heads, V, false), b = attention(B, T, C, heads, V, false);
  optim::AdamW oa(a.tensors(), optim::AdamWOptions(3e-3)), ob(b.tensors(), optim::AdamWOptions(3e-3));
  CompiledStep sa = compile(a.loss, a.params, &oa, batch), sb = compile(b.loss, b.params, &ob, batch);
  ASSERT_EQ(sa.run(batch), sb.run(batch));
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<OpTime> prof = sb.profile(batch);
  const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(sa.run(batch), sb.fetch("loss").item<double>());
  EXPECT_EQ(ob.step_count(), 2);
  for (int s = 0; s < 2; ++s) EXPECT_EQ(sa.run(batch), sb.run(batch)) << "step " << s + 3;
  for (size_t i = 0; i < a.params.size(); ++i)
    EXPECT_TRUE(all_close(b.params[i].tensor, a.params[i].tensor, 0, 0)) << a.params[i].name;
  const graph::MemoryPlan& plan = sb.executor().plan();
  int ran = 0;
  for (bool skip : plan.skip) ran += skip ? 0 : 1;
  int counted = 0;
  double sum = 0;
  std::map<std::string, int> by_name;
  for (const OpTime& t : prof) {
    EXPECT_GE(t.ms, 0.0) << t.op;
    EXPECT_EQ(by_name.count(t.op), 0u) << t.op << " listed twice";
    by_name[t.op] = t.nodes;
    if (t.op != "(write-backs)") counted += t.nodes;
    sum += t.ms;
  }
  EXPECT_EQ(counted, ran);
  EXPECT_GT(by_name["matmul"], 0);
  EXPECT_GT(by_name["layer_norm"], 0);
  EXPECT_LE(sum, wall);
  for (size_t i = 1; i < prof.size(); ++i) EXPECT_GE(prof[i - 1].ms, prof[i].ms) << "the most time first";
}

// With a NodeTime list, profile also gives every node run, in plan order, with its operands' and
// results' shapes: as many nodes as the by-op table counts, each op's node times summing to its
// row; format_profile_by_signature groups nodes of one op and equal shapes into one row.
TEST(TrainStep, ProfileNodesCarryTheirShapes) {
  const int B = 2, T = 6, C = 16, heads = 2, V = 13;
  Inputs batch{{"x", ids(B * T, V, 4)}, {"y", ids(B * T, V, 5)}};
  Model m = attention(B, T, C, heads, V, false);
  optim::AdamW opt(m.tensors(), optim::AdamWOptions(3e-3));
  CompiledStep step = compile(m.loss, m.params, &opt, batch);
  step.run(batch);
  std::vector<NodeTime> nodes{{"stale", "", 1.0}};  // cleared by the call
  const std::vector<OpTime> prof = step.profile(batch, &nodes);
  std::map<std::string, std::pair<int, double>> from_nodes;
  for (const NodeTime& n : nodes) {
    from_nodes[n.op].first += 1;
    from_nodes[n.op].second += n.ms;
    EXPECT_NE(n.signature.find(" -> "), std::string::npos) << n.op << ": " << n.signature;
  }
  EXPECT_EQ(from_nodes.count("stale"), 0u);
  for (const OpTime& t : prof) {
    if (t.op == "(write-backs)") continue;
    EXPECT_EQ(from_nodes[t.op].first, t.nodes) << t.op;
    EXPECT_NEAR(from_nodes[t.op].second, t.ms, 1e-9) << t.op;
  }
  // the cross-entropy of logits [B·T, V] against B·T ids, a scalar loss
  bool found = false;
  for (const NodeTime& n : nodes)
    if (n.op == "cross_entropy") {
      EXPECT_EQ(n.signature, "f32[12, 13] i32[12] -> f32[]");
      found = true;
    }
  EXPECT_TRUE(found);
  // grouped: two nodes of one op and signature make one row of 2 nodes; rows capped
  const std::vector<NodeTime> made{{"add", "f32[2] f32[2] -> f32[2]", 1.0},
                                   {"mul", "f32[2] f32[2] -> f32[2]", 1.5},
                                   {"add", "f32[2] f32[2] -> f32[2]", 1.0},
                                   {"add", "f32[3] f32[3] -> f32[3]", 0.5}};
  const std::string table = format_profile_by_signature(made, 2);
  EXPECT_NE(table.find("add                                  2      2.000   50.0%  f32[2] f32[2] -> f32[2]"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("mul "), std::string::npos) << table;
  EXPECT_EQ(table.find("f32[3]"), std::string::npos) << "only 2 rows: " << table;
}

}  // namespace
}  // namespace tessera
