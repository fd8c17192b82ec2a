// The collective ops and the compiled data-parallel step on a group of one process:
//   - all_reduce / collective_wait: the result is the input (a sum over one rank), errors are clear;
//   - a compiled step over DataParallelUpdater (AdamW with clipping) gives the bits of the same
//     step over the bare optimizer for 5 steps (the all-reduce of one rank is a copy);
//   - in its graph every all_reduce starts right after its bucket's gradients, the first before
//     the last backward node, and every collective_wait comes after the last backward node;
//   - DataParallelUpdater::update (one parameter) is refused;
//   - Generator::set_share: each of 3 ranks' dropout on its rows is the one process's dropout of
//     the whole batch on those rows, compiled as eagerly, and every rank's offset advances alike.
// The multi-process runs are in mpi_group_mpitest.cpp (ctest mpi_np2, mpi_np3).
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "core/distributed/data_parallel.h"
#include "core/error.h"
#include "core/graph/compile.h"
#include "core/random.h"
#include "kernels/ops.h"
#include "layers/linear.h"
#include "optim/adamw.h"

namespace tessera {
namespace {

TEST(CollectiveOps, AllReduceOverOneRankIsTheInput) {
  auto g = dist::single_process_group();
  Generator gen(3);
  const Tensor x = normal({5, 7}, 0, 1, gen);
  const int t = g->reserve_tickets(1);
  const Tensor r = collective_wait(all_reduce(x, g, /*average=*/true, t), g, t);
  EXPECT_EQ(r.to_vector<float>(), x.to_vector<float>());
  EXPECT_NE(r.data_ptr(), x.data_ptr()) << "a new tensor";
  EXPECT_EQ(g->reserve_tickets(2), t + 1) << "tickets are not handed out twice";
  EXPECT_THROW(all_reduce(x, nullptr, true, 0), ValueError);
  EXPECT_THROW(all_reduce(x, g, true, -1), ValueError);
}

struct Net {
  nn::Linear a, b, c;
  explicit Net(Generator&& gen)
      : a(nn::LinearOptions(6, 16), gen), b(nn::LinearOptions(16, 16), gen), c(nn::LinearOptions(16, 3), gen) {}
  std::vector<Tensor> params() const {
    return {a.weight(), a.bias(), b.weight(), b.bias(), c.weight(), c.bias()};
  }
  Tensor loss(const Tensor& x, const Tensor& t) const {
    const Tensor d = sub(c.forward(tanh(b.forward(tanh(a.forward(x))))), t);
    return mean(mul(d, d));
  }
};

// 5 AdamW steps (clipping at 0.5) compiled over the optimizer itself or over DataParallelUpdater.
std::vector<std::vector<float>> train(bool data_parallel, std::vector<std::string>* op_order = nullptr,
                                      std::vector<graph::NodePhase>* phases = nullptr) {
  Net m(Generator(5));
  optim::AdamW opt(m.params(), optim::AdamWOptions(1e-2));
  opt.set_clip_norm(0.5);
  dist::DataParallelUpdater dp(opt, dist::single_process_group(), /*bucket_bytes=*/1200, /*first_bytes=*/200);
  if (data_parallel) {
    EXPECT_GE(dp.buckets().size(), 3u);
  }
  auto loss_fn = [&](const std::map<std::string, Tensor>& in) { return m.loss(in.at("x"), in.at("t")); };
  Generator data(9);
  std::map<std::string, Tensor> in = {{"x", normal({8, 6}, 0, 1, data)}, {"t", normal({8, 3}, 0, 1, data)}};
  CompiledStep step = compile(loss_fn, m.params(), data_parallel ? static_cast<ParamUpdater*>(&dp) : &opt, in);
  for (int s = 0; s < 5; ++s) {
    in = {{"x", normal({8, 6}, 0, 1, data)}, {"t", normal({8, 3}, 0, 1, data)}};
    step.run(in);
  }
  if (op_order)
    for (const graph::OpNode& n : step.executor().graph().nodes) {
      op_order->push_back(n.op->name());
      phases->push_back(n.phase);
    }
  std::vector<std::vector<float>> out;
  for (const Tensor& p : m.params()) out.push_back(p.to_vector<float>());
  return out;
}

TEST(DataParallelUpdater, OneRankGivesTheBitsOfTheBareOptimizer) {
  const auto plain = train(false), dp = train(true);
  ASSERT_EQ(plain.size(), dp.size());
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_EQ(std::memcmp(plain[i].data(), dp[i].data(), plain[i].size() * sizeof(float)), 0) << "parameter " << i;
}

TEST(DataParallelUpdater, ReductionsStartDuringBackwardAndAreJoinedAfterIt) {
  std::vector<std::string> ops;
  std::vector<graph::NodePhase> phases;
  train(true, &ops, &phases);
  int last_backward = -1;
  std::vector<int> reduces, waits;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (phases[i] != graph::NodePhase::update) last_backward = static_cast<int>(i);
    if (ops[i] == "all_reduce") reduces.push_back(static_cast<int>(i));
    if (ops[i] == "collective_wait") waits.push_back(static_cast<int>(i));
  }
  ASSERT_GE(reduces.size(), 3u);
  ASSERT_EQ(waits.size(), reduces.size());
  EXPECT_LT(reduces.front(), last_backward) << "the first bucket's all-reduce is issued before the last backward node";
  EXPECT_LT(reduces[reduces.size() - 2], last_backward) << "all but the last bucket overlap backward";
  EXPECT_GT(waits.front(), last_backward) << "the joins come after backward";
}

TEST(DataParallelUpdater, OneParameterAtATimeIsRefused) {
  Net m(Generator(5));
  optim::AdamW opt(m.params(), optim::AdamWOptions(1e-2));
  dist::DataParallelUpdater dp(opt, dist::single_process_group());
  const Tensor lr = full({}, 0.1, TensorOptions(DType::f64)), step = full({}, 1.0, TensorOptions(DType::f64));
  EXPECT_THROW(dp.update(0, zeros({16, 6}), lr, step), ValueError);
  EXPECT_EQ(&dp.params(), &opt.params());
  EXPECT_THROW(dist::DataParallelUpdater(opt, nullptr), ValueError);
}

TEST(GeneratorShare, EachRanksDropoutIsTheOneProcessMaskOnItsRows) {
  constexpr int kWorld = 3;
  Generator data(4);
  const Tensor x = normal({6 * kWorld, 8}, 0, 1, data);  // the global batch: 6 rows a rank
  Generator one(21);
  const Tensor whole = dropout(dropout(x, 0.3, one), 0.5, one);  // two draws
  for (int r = 0; r < kWorld; ++r) {
    Generator g(21);
    g.set_share(r, kWorld);
    const Tensor mine = slice(x, 0, 6 * r, 6 * (r + 1)).clone();
    const Tensor got = dropout(dropout(mine, 0.3, g), 0.5, g);
    EXPECT_EQ(got.to_vector<float>(), slice(whole, 0, 6 * r, 6 * (r + 1)).clone().to_vector<float>()) << "rank " << r;
    EXPECT_EQ(g.offset(), one.offset()) << "every rank's stream advances as the one process's";
    // compiled: the step's nodes keep the rank's share of each draw
    Generator c(21);
    c.set_share(r, kWorld);
    auto fn = [&](const std::map<std::string, Tensor>& in) { return sum(dropout(dropout(in.at("x"), 0.3, c), 0.5, c)); };
    Tensor w = zeros({1}).requires_grad_();  // a parameter for the step (unused by the loss)
    CompiledStep step = compile([&](const std::map<std::string, Tensor>& in) { return add(fn(in), sum(mul(w, 0.0))); },
                                std::vector<Tensor>{w}, nullptr, {{"x", mine}}, &c);
    step.run({{"x", mine}});
    EXPECT_NEAR(step.fetch("loss").item<float>(), sum(got).item<float>(), 1e-4) << "rank " << r;
    EXPECT_EQ(c.offset(), one.offset());
  }
  Generator g(1);
  EXPECT_THROW(g.set_share(2, 2), ValueError);
  EXPECT_THROW(g.set_share(0, 0), ValueError);
}

}  // namespace
}  // namespace tessera
