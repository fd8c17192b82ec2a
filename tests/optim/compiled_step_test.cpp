// Every optimizer in a compiled training step (core/graph/compile.h) against eager steps:
// losses, parameters and state bitwise equal on the CPU, with global-norm clipping inside the
// update (active and inactive; the norm it clips with, eager and as the step's output) and
// parameter groups whose order differs from the model's.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>

#include "core/graph/compile.h"
#include "core/random.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using testing::all_close;
using Inputs = std::map<std::string, Tensor>;

struct Model {
  std::vector<graph::NamedParam> params;
  std::function<Tensor(const Inputs&)> loss;
};

// A two-layer MLP with a bias and a layer norm gain: names that the default groups split.
Model mlp() {
  Generator gen(7);
  Tensor w1 = normal({6, 16}, 0, 0.5, gen).requires_grad_(), b1 = normal({16}, 0, 0.1, gen).requires_grad_();
  Tensor gamma = add(normal({16}, 0, 0.1, gen), 1.0).detach().requires_grad_();
  Tensor beta = normal({16}, 0, 0.1, gen).requires_grad_(), w2 = normal({16, 5}, 0, 0.5, gen).requires_grad_();
  Model m;
  m.params = {{"fc1.weight", w1}, {"fc1.bias", b1}, {"ln.gamma", gamma}, {"ln.beta", beta}, {"fc2.weight", w2}};
  m.loss = [=](const Inputs& in) {
    Tensor h = tanh(layer_norm(add(matmul(in.at("x"), w1), b1), gamma, beta));
    return cross_entropy(matmul(h, w2), in.at("y"));
  };
  return m;
}

Inputs batch() {
  std::vector<int32_t> y = {0, 3, 1, 4, 2, 2, 0, 1, 3};
  return {{"x", testing::test_randn({9, 6}, 5, DType::f32)}, {"y", from_vector(y, {9})}};
}

// make_opt(params) builds an optimizer over the model's parameters (in default groups).
template <class Opt, class Options>
void expect_same_training(const Options& options, double clip_norm, int steps = 5) {
  Model eager = mlp(), traced = mlp();
  Opt opt_eager(optim::param_groups_default(eager.params, 0.05), options);
  Opt opt_traced(optim::param_groups_default(traced.params, 0.05), options);
  opt_eager.set_clip_norm(clip_norm);
  opt_traced.set_clip_norm(clip_norm);
  const Inputs in = batch();
  CompiledStep step = compile(traced.loss, traced.params, &opt_traced, in);
  EXPECT_EQ(step.has_output(optim::kGradNormOutput), clip_norm > 0);
  for (int s = 0; s < steps; ++s) {
    Tensor loss = eager.loss(in);
    loss.backward();
    std::vector<Tensor> grads;
    for (const auto& p : eager.params) grads.push_back(p.tensor.grad());
    const double norm = optim::global_grad_norm(grads).item<double>();
    // The first step's gradients are big enough for the small clip norm to engage.
    if (s == 0 && clip_norm > 0) {
      EXPECT_EQ(norm > clip_norm, clip_norm < 1.0) << "norm " << norm;
    }
    opt_eager.step();
    opt_eager.zero_grad();
    ASSERT_EQ(step.run(in), loss.item<double>()) << "loss differs at step " << s;
    // The norm the update clipped with (before clipping), eager and compiled: bitwise the same.
    if (clip_norm > 0) {
      EXPECT_EQ(opt_eager.last_grad_norm(), norm) << "step " << s;
      EXPECT_EQ(step.fetch(optim::kGradNormOutput).item<double>(), norm) << "step " << s;
    } else {
      EXPECT_TRUE(std::isnan(opt_eager.last_grad_norm())) << "no clipping, no norm";
    }
  }
  EXPECT_EQ(opt_traced.step_count(), steps);
  for (size_t i = 0; i < eager.params.size(); ++i)
    EXPECT_TRUE(all_close(traced.params[i].tensor, eager.params[i].tensor, 0, 0)) << eager.params[i].name;
  std::vector<Tensor> se = opt_eager.state(), st = opt_traced.state();
  ASSERT_EQ(se.size(), st.size());
  for (size_t i = 0; i < se.size(); ++i) EXPECT_TRUE(all_close(st[i], se[i], 0, 0)) << "state " << i;
}

TEST(CompiledStep, SgdNesterovWithClippingMatchesEagerBitwise) {
  expect_same_training<optim::SGD>(optim::SGDOptions(0.2).momentum(0.9).nesterov(true), 0.05);
  expect_same_training<optim::SGD>(optim::SGDOptions(0.2).momentum(0.9), 1e3);
  expect_same_training<optim::SGD>(optim::SGDOptions(0.2), 0.0);
}

TEST(CompiledStep, AdamWithClippingMatchesEagerBitwise) {
  expect_same_training<optim::Adam>(optim::AdamOptions(0.01).weight_decay(0.1), 0.05);
  expect_same_training<optim::Adam>(optim::AdamOptions(0.01), 0.0);
}

TEST(CompiledStep, AdamWWithClippingMatchesEagerBitwise) {
  expect_same_training<optim::AdamW>(optim::AdamWOptions(0.01), 0.05);
  expect_same_training<optim::AdamW>(optim::AdamWOptions(0.01), 1e3);
}

TEST(CompiledStep, AdafactorWithClippingMatchesEagerBitwise) {
  expect_same_training<optim::Adafactor>(optim::AdafactorOptions(0.02), 0.05);
  expect_same_training<optim::Adafactor>(optim::AdafactorOptions().relative_step(true).scale_parameter(true), 0.0);
}

TEST(CompiledStep, ClippingAddsTheNormToTheGraph) {
  Model a = mlp(), b = mlp();
  optim::AdamW plain(optim::param_groups_default(a.params, 0.1)), clipped(optim::param_groups_default(b.params, 0.1));
  clipped.set_clip_norm(1.0);
  CompiledStep s1 = compile(a.loss, a.params, &plain, batch()), s2 = compile(b.loss, b.params, &clipped, batch());
  const std::string g1 = s1.summary(), g2 = s2.summary();
  EXPECT_GT(s2.executor().graph().nodes.size(), s1.executor().graph().nodes.size());
  EXPECT_NE(g2.find("where"), std::string::npos) << g2;
  // The updates are still written in place: p, m, v of 5 parameters.
  EXPECT_EQ(s2.executor().plan().bound_writes, 15) << s2.executor().plan().summary();
}

}  // namespace
}  // namespace tessera
