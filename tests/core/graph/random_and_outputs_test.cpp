// Compiled steps with dropout (random ops drawing from the step's generator) and with extra
// outputs marked by the loss function (graph::mark_output), against the same steps run eagerly.
#include <gtest/gtest.h>

#include "core/graph/compile.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::test_randn;
using Inputs = std::map<std::string, Tensor>;

// Two dense layers with dropout after each: loss = mean((dropout(tanh(x·w1), p)·w2 → dropout)^2).
struct DropoutMlp {
  Tensor w1 = test_randn({12, 24}, 1, DType::f32).requires_grad_();
  Tensor w2 = test_randn({24, 5}, 2, DType::f32).requires_grad_();
  double p = 0.3;
  bool remat = false;
  Tensor loss(const Inputs& in, Generator& gen) const {
    auto hidden = [&] { return dropout(tanh(matmul(in.at("x"), w1)), p, gen); };
    Tensor h = remat ? graph::recompute(hidden) : hidden();
    Tensor y = dropout(matmul(h, w2), p, gen);
    return mean(mul(y, y));
  }
  std::vector<graph::NamedParam> params() const { return {{"w1", w1}, {"w2", w2}}; }
};

// Eager steps and compiled steps from the same parameters and generator state agree bitwise,
// step after step, and leave their generators at the same offset.
void expect_eager_equals_compiled(bool remat) {
  DropoutMlp eager, traced;
  eager.remat = traced.remat = remat;
  optim::SGD opt_e({eager.w1, eager.w2}, optim::SGDOptions(0.1)), opt_t({traced.w1, traced.w2}, optim::SGDOptions(0.1));
  Generator gen_e(77, 3), gen_t(77, 3);
  const Inputs batch{{"x", test_randn({9, 12}, 3, DType::f32)}};
  CompiledStep step = compile([&](const Inputs& in) { return traced.loss(in, gen_t); }, traced.params(), &opt_t,
                              batch, &gen_t);
  EXPECT_EQ(gen_t.state(), (Generator::State{77, 3})) << "tracing draws nothing";
  for (int s = 0; s < 4; ++s) {
    Tensor l = eager.loss(batch, gen_e);
    l.backward();
    opt_e.step();
    opt_e.zero_grad();
    ASSERT_EQ(step.run(batch), l.item<double>()) << "step " << s;
    ASSERT_EQ(gen_t.state(), gen_e.state()) << "step " << s;
  }
  EXPECT_TRUE(all_close(traced.w1, eager.w1, 0, 0));
  EXPECT_TRUE(all_close(traced.w2, eager.w2, 0, 0));
}

TEST(CompiledDropout, MatchesEagerStepForStep) { expect_eager_equals_compiled(false); }

TEST(CompiledDropout, RecomputedDropoutRedrawsTheSameMask) { expect_eager_equals_compiled(true); }

TEST(CompiledDropout, MasksChangeEveryRunAndFollowTheGenerator) {
  DropoutMlp m;
  Generator gen(9);
  const Inputs batch{{"x", test_randn({9, 12}, 4, DType::f32)}};
  CompiledStep step = compile([&](const Inputs& in) { return m.loss(in, gen); }, m.params(), nullptr, batch, &gen);
  const uint64_t blocks = step.executor().graph().random_blocks;
  EXPECT_EQ(blocks, (9u * 24 + 3) / 4 + (9u * 5 + 3) / 4) << "one share: both masks";
  const double first = step.run(batch);
  EXPECT_EQ(gen.offset(), blocks);
  const double second = step.run(batch);
  EXPECT_NE(first, second) << "a new mask each run (no parameter update here)";
  gen.set_state({9, 0});  // rewind: the first run's masks again
  EXPECT_EQ(step.run(batch), first);
}

// The draws move through data, not through the nodes: every random node reads the graph's
// Philox-base input, its own `start` is its offset in the step's share, and runs never replace
// a node's op (so a captured CUDA graph, whose kernel arguments are fixed, stays valid).
TEST(CompiledDropout, RandomNodesReadTheBaseInputAndKeepTheirArguments) {
  DropoutMlp m;
  m.remat = true;  // recomputed copies read the base too
  optim::SGD opt({m.w1, m.w2}, optim::SGDOptions(0.1));
  Generator gen(4, 11);
  const Inputs batch{{"x", test_randn({9, 12}, 8, DType::f32)}};
  CompiledStep step = compile([&](const Inputs& in) { return m.loss(in, gen); }, m.params(), &opt, batch, &gen);
  const graph::Graph& g = step.executor().graph();
  ASSERT_GE(g.random_base, 0);
  EXPECT_EQ(g.values[g.random_base].name, graph::kRandomBaseInput);
  EXPECT_EQ(g.values[g.random_base].meta, (TensorMeta{Shape{2}, DType::i32, Device::cpu()}));
  EXPECT_EQ(g.random_start, 11u);
  std::vector<const OpInstance*> ops;
  int random_nodes = 0, recomputed = 0;
  for (const graph::OpNode& n : g.nodes) {
    ops.push_back(n.op.get());
    if (!n.op->random()) continue;
    ++random_nodes;
    recomputed += n.phase == graph::NodePhase::recompute;
    EXPECT_EQ(n.inputs.back(), g.random_base) << "the base is the last input";
    EXPECT_EQ(n.op->random_stream(), (std::pair<uint64_t, uint64_t>{4, n.random_offset}));
  }
  EXPECT_EQ(random_nodes, 5) << "2 forward, 2 backward, 1 recomputed";
  EXPECT_EQ(recomputed, 1);
  for (int s = 0; s < 3; ++s) step.run(batch);
  for (size_t i = 0; i < g.nodes.size(); ++i) EXPECT_EQ(g.nodes[i].op.get(), ops[i]) << "node " << i << " was replaced";
  // The base is the executor's to write: not an input the caller feeds.
  const Inputs with_base{{"x", batch.at("x")}, {graph::kRandomBaseInput, philox_base(0)}};
  testing::expect_error<ValueError>([&] { step.run(with_base); }, {graph::kRandomBaseInput});
  testing::expect_error<ValueError>(
      [&] { compile([&](const Inputs& in) { return sum(in.at("x")); }, m.params(), nullptr, with_base); },
      {"reserved", graph::kRandomBaseInput});
}

// An executor that was never given a base draws the blocks the trace saw (the generator's state
// when tracing), as eager mode from that state does.
TEST(CompiledDropout, WithoutASetBaseAnExecutorDrawsTheTracedBlocks) {
  DropoutMlp traced, eager;
  Generator gen_t(6, 40), gen_e(6, 40);
  const Inputs batch{{"x", test_randn({9, 12}, 9, DType::f32)}};
  std::vector<std::pair<std::string, TensorMeta>> metas{{"x", batch.at("x").meta()}};
  graph::Executor ex(graph::trace_step([&](const Inputs& in) { return traced.loss(in, gen_t); }, metas,
                                       traced.params(), nullptr, &gen_t));
  EXPECT_EQ(gen_t.offset(), 40u) << "tracing draws nothing";
  Tensor l = eager.loss(batch, gen_e);
  l.backward();
  for (int run = 0; run < 2; ++run) {
    ex.run(batch);
    EXPECT_EQ(ex.fetch("loss").item<double>(), l.item<double>()) << "run " << run;
    EXPECT_TRUE(all_close(ex.fetch("grad/w1"), eager.w1.grad(), 0, 0));
  }
  ex.set_random_base(40 + ex.graph().random_blocks);  // the next share: eager's next step
  ex.run(batch);
  EXPECT_EQ(ex.fetch("loss").item<double>(), eager.loss(batch, gen_e).item<double>());
}

TEST(MarkOutput, ExtraOutputsAreFetchedAfterARun) {
  Tensor w = test_randn({6, 4}, 5, DType::f64).requires_grad_();
  auto fn = [&](const Inputs& in) {
    Tensor h = tanh(matmul(in.at("x"), w));
    graph::mark_output("h", h);                  // an intermediate
    graph::mark_output("x_again", in.at("x"));   // an input passes through
    return sum(h);
  };
  const Tensor x = test_randn({3, 6}, 6, DType::f64);
  CompiledStep step = compile(fn, {{"w", w}}, nullptr, {{"x", x}});
  step.run({{"x", x}});
  EXPECT_TRUE(all_close(step.fetch("h"), tanh(matmul(x, w)), 0, 0));
  EXPECT_TRUE(all_close(step.fetch("x_again"), x, 0, 0));
  EXPECT_DOUBLE_EQ(fn({{"x", x}}).item<double>(), sum(tanh(matmul(x, w))).item<double>()) << "eager: no effect";
}

TEST(MarkOutput, BadNamesAreClearErrors) {
  Tensor w = test_randn({4}, 7, DType::f32).requires_grad_();
  for (std::string name : {"loss", "grad/w", ""}) {
    auto fn = [&](const Inputs& in) {
      Tensor y = mul(in.at("x"), w);
      graph::mark_output(name, y);
      return sum(y);
    };
    testing::expect_error<ValueError>([&] { compile(fn, {w}, nullptr, {{"x", ones({4})}}); }, {"mark_output"});
  }
  auto twice = [&](const Inputs& in) {
    Tensor y = mul(in.at("x"), w);
    graph::mark_output("y", y);
    graph::mark_output("y", y);
    return sum(y);
  };
  testing::expect_error<ValueError>([&] { compile(twice, {w}, nullptr, {{"x", ones({4})}}); }, {"'y'", "twice"});
}

}  // namespace
}  // namespace tessera
