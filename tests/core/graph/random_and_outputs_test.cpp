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
