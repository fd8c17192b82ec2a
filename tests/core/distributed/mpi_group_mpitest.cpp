// The MPI process group under mpirun (ctest mpi_np2 and mpi_np3, label mpi; every rank runs
// every test, so each test makes the same collective calls on every rank):
//   - the launcher's environment agrees with MPI; all_reduce (sum, average) and broadcast give the
//     expected values and the same bits on every rank; bf16, CUDA and undefined tensors are one
//     clear error;
//   - data-parallel SGD over 20 steps, each rank on its part of the batch with average_gradients,
//     equals one process on the whole batch (computed in each rank) within 1e-5 relative, with
//     several buckets; two data-parallel runs give the same bits;
//   - GradientReducer reduces buckets during backward (before the first layer's gradients are
//     final) with the bits of average_gradients after backward, and names an unreduced bucket;
//   - a compiled step over DataParallelUpdater (the all-reduces as nodes of its graph) equals one
//     process on the whole batch within 1e-5 relative over 20 steps, with the same bits in two runs
//     and on every rank, and its first all-reduce runs before the last backward node;
//   - gradient accumulation over two micro-steps (the reducer off, then on) equals the doubled
//     batch; broadcast_parameters
//     makes ranks initialized apart equal; check_parameters_equal names a differing parameter on
//     every rank.
// Not a gtest_discover_tests executable: main() starts MPI once for all tests.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include "core/distributed/data_parallel.h"
#include "core/distributed/mpi_group.h"
#include "core/distributed/world.h"
#include "core/error.h"
#include "core/graph/compile.h"
#include "core/random.h"
#include "kernels/ops.h"
#include "layers/linear.h"
#include "optim/sgd.h"

namespace tessera {
namespace {

std::shared_ptr<dist::ProcessGroup> g_group;

// max |a − b| / max |b| over two same-shaped f32 tensors
double relative_diff(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(x[i]) - y[i]));
    den = std::max(den, std::abs(static_cast<double>(y[i])));
  }
  return den > 0 ? num / den : num;
}

// Whether t has the same bits on every rank (rank 0's copy broadcast and compared).
bool same_on_every_rank(const Tensor& t) {
  Tensor mine = t.clone().detach();
  Tensor root = t.clone().detach();
  g_group->broadcast(root, 0);
  const std::vector<float> a = mine.to_vector<float>(), b = root.to_vector<float>();
  return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(MpiGroup, TheLauncherAgreesWithMpi) {
  const dist::WorldInfo w = dist::detect_world();
  EXPECT_EQ(w.launcher, "mpirun");
  EXPECT_EQ(w.rank, g_group->rank());
  EXPECT_EQ(w.size, g_group->size());
  EXPECT_GE(g_group->size(), 2);
  EXPECT_EQ(g_group->backend(), "mpi");
}

TEST(MpiGroup, AllReduceAndBroadcast) {
  const int r = g_group->rank(), n = g_group->size();
  Tensor t = from_vector<float>({float(r + 1), float(10 * (r + 1))}, {2});
  g_group->all_reduce(t, dist::ReduceOp::sum);
  const float s = n * (n + 1) / 2.0f;
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{s, 10 * s}));
  Tensor d = from_vector<double>({double(r)}, {1});
  g_group->all_reduce(d, dist::ReduceOp::average);
  EXPECT_DOUBLE_EQ(d.item<double>(), (n - 1) / 2.0);
  Tensor b = from_vector<float>({float(r), float(-r)}, {2});
  g_group->broadcast(b, n - 1);
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{float(n - 1), float(1 - n)}));
  g_group->barrier();
}

TEST(MpiGroup, EveryRankGetsTheSameBits) {
  Generator gen(100 + g_group->rank());  // other values on every rank
  Tensor t = normal({1000}, 0, 1, gen);
  g_group->all_reduce(t, dist::ReduceOp::average);
  EXPECT_TRUE(same_on_every_rank(t));
}

TEST(MpiGroup, WrongTensorsAreOneClearError) {
  Tensor half = zeros({4}, TensorOptions(DType::bf16));
  try {
    g_group->all_reduce(half, dist::ReduceOp::sum);
    ADD_FAILURE() << "bf16 was reduced";
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("takes f32 or f64 tensors; got bf16"), std::string::npos) << e.what();
  }
  Tensor none;
  EXPECT_THROW(g_group->all_reduce(none, dist::ReduceOp::sum), ValueError);
  Tensor t = zeros({2});
  EXPECT_THROW(g_group->broadcast(t, g_group->size()), ValueError);
  g_group->barrier();  // the ranks are in step again
}

// A two-layer MLP and its mean squared error.
struct Mlp {
  nn::Linear a, b;
  explicit Mlp(Generator&& gen) : a(nn::LinearOptions(6, 8), gen), b(nn::LinearOptions(8, 3), gen) {}
  std::vector<Tensor> params() const { return {a.weight(), a.bias(), b.weight(), b.bias()}; }
  Tensor loss(const Tensor& x, const Tensor& t) const {
    const Tensor d = sub(b.forward(tanh(a.forward(x))), t);
    return mean(mul(d, d));
  }
};

// 20 SGD steps of an Mlp: on the whole batch (rows = -1) or on this rank's rows with the
// gradients averaged over the group. Returns the parameters after each step.
std::vector<std::vector<Tensor>> train(bool data_parallel) {
  constexpr int64_t kRowsPerRank = 4;
  const int r = g_group->rank(), n = g_group->size();
  Mlp m(Generator(7));
  optim::SGD opt(m.params(), optim::SGDOptions(0.1));
  const auto buckets = dist::plan_buckets(m.params(), 64, 32);  // several buckets on purpose
  std::vector<std::vector<Tensor>> history;
  for (int step = 0; step < 20; ++step) {
    Generator data(1000 + step);  // the global batch, the same on every rank
    const Tensor x = normal({kRowsPerRank * n, 6}, 0, 1, data), t = normal({kRowsPerRank * n, 3}, 0, 1, data);
    if (data_parallel) {
      m.loss(slice(x, 0, r * kRowsPerRank, (r + 1) * kRowsPerRank), slice(t, 0, r * kRowsPerRank, (r + 1) * kRowsPerRank))
          .backward();
      dist::average_gradients(m.params(), buckets, *g_group);
    } else {
      m.loss(x, t).backward();
    }
    opt.step();
    opt.zero_grad();
    std::vector<Tensor> now;
    for (const Tensor& p : m.params()) now.push_back(p.clone().detach());
    history.push_back(now);
  }
  return history;
}

TEST(MpiDataParallel, SgdOnEachRanksRowsEqualsOneProcessOnTheWholeBatch) {
  ASSERT_GE(dist::plan_buckets(Mlp(Generator(7)).params(), 64, 32).size(), 3u);
  const auto one = train(false), dp = train(true), again = train(true);
  for (size_t s = 0; s < one.size(); ++s)
    for (size_t i = 0; i < one[s].size(); ++i) {
      EXPECT_LE(relative_diff(dp[s][i], one[s][i]), 1e-5) << "step " << s << " parameter " << i;
      EXPECT_TRUE(same_on_every_rank(dp[s][i])) << "step " << s << " parameter " << i;
      const std::vector<float> a = dp[s][i].to_vector<float>(), b = again[s][i].to_vector<float>();
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "two runs, step " << s;
    }
}

// The reducer during backward: its buckets are reduced while backward runs (the first before
// the first layer's gradients are final: x's hook, on that layer's input, sees all but the last
// bucket reduced), and 20 steps give the bits of average_gradients after backward.
TEST(MpiDataParallel, ReducerDuringBackwardOverlapsAndMatchesTheReduceAfter) {
  constexpr int64_t kRows = 4;
  const int r = g_group->rank(), n = g_group->size();
  const auto after = train(true);
  Mlp m(Generator(7));
  optim::SGD opt(m.params(), optim::SGDOptions(0.1));
  dist::GradientReducer reducer(m.params(), g_group, 64, 32);  // the buckets train() plans
  ASSERT_GE(reducer.buckets().size(), 3u);
  for (int step = 0; step < 20; ++step) {
    Generator data(1000 + step);
    const Tensor x = normal({kRows * n, 6}, 0, 1, data), t = normal({kRows * n, 3}, 0, 1, data);
    Tensor xr = slice(x, 0, r * kRows, (r + 1) * kRows).detach().requires_grad_();
    size_t reduced_when_input_final = 0;
    xr.add_grad_ready_hook([&] { reduced_when_input_final = reducer.reduced().size(); });
    m.loss(xr, slice(t, 0, r * kRows, (r + 1) * kRows)).backward();
    EXPECT_EQ(reducer.reduced().size(), reducer.buckets().size());
    EXPECT_GE(reduced_when_input_final, 1u) << "a bucket was reduced during backward";
    EXPECT_LT(reduced_when_input_final, reducer.buckets().size()) << "the first layer's bucket comes last";
    reducer.finish();
    opt.step();
    opt.zero_grad();
    for (size_t i = 0; i < after[step].size(); ++i) {
      const std::vector<float> a = m.params()[i].to_vector<float>(), b = after[step][i].to_vector<float>();
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "step " << step << " parameter " << i;
    }
  }
  // a bucket whose gradients a pass never made final is a clear error at finish (on every rank)
  Mlp other(Generator(8));
  dist::GradientReducer partial(other.params(), g_group, 64, 32);
  Generator gen(3);
  sum(other.a.forward(normal({2, 6}, 0, 1, gen))).backward();  // layer b unused: its buckets never final
  try {
    partial.finish();
    ADD_FAILURE() << "finish() with unreduced buckets";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("was not reduced"), std::string::npos) << e.what();
  }
}

// The compiled data-parallel step: 20 SGD steps of DataParallelUpdater on this rank's rows equal
// one process on the whole batch (1e-5 relative), two runs give the same bits, every rank holds the
// same bits, and the step's graph starts its first all-reduce before its last backward node.
TEST(MpiDataParallel, CompiledStepEqualsOneProcessOnTheWholeBatch) {
  constexpr int64_t kRows = 4;
  const int r = g_group->rank(), n = g_group->size();
  const auto one = train(false);
  auto compiled = [&] {
    Mlp m(Generator(7));
    optim::SGD opt(m.params(), optim::SGDOptions(0.1));
    dist::DataParallelUpdater dp(opt, g_group, 64, 32);
    auto loss_fn = [&](const std::map<std::string, Tensor>& in) { return m.loss(in.at("x"), in.at("t")); };
    std::optional<CompiledStep> step;
    std::vector<std::vector<Tensor>> history;
    for (int s = 0; s < 20; ++s) {
      Generator data(1000 + s);  // the global batch of train(), this rank's rows
      const Tensor x = normal({kRows * n, 6}, 0, 1, data), t = normal({kRows * n, 3}, 0, 1, data);
      const std::map<std::string, Tensor> in = {{"x", slice(x, 0, r * kRows, (r + 1) * kRows).clone()},
                                                {"t", slice(t, 0, r * kRows, (r + 1) * kRows).clone()}};
      if (!step) step.emplace(compile(loss_fn, m.params(), &dp, in));
      step->run(in);
      std::vector<Tensor> now;
      for (const Tensor& p : m.params()) now.push_back(p.clone().detach());
      history.push_back(now);
    }
    EXPECT_GE(dp.buckets().size(), 3u);
    // the graph: every all_reduce before the last backward node, every collective_wait after it
    const graph::Graph& g = step->executor().graph();
    int last_backward = -1, first_reduce = -1, first_wait = -1;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const std::string name = g.nodes[i].op->name();
      if (g.nodes[i].phase != graph::NodePhase::update) last_backward = static_cast<int>(i);
      if (name == "all_reduce" && first_reduce < 0) first_reduce = static_cast<int>(i);
      if (name == "collective_wait" && first_wait < 0) first_wait = static_cast<int>(i);
    }
    EXPECT_GE(first_reduce, 0);
    EXPECT_LT(first_reduce, last_backward) << "the first bucket's all-reduce is issued before the last backward node";
    EXPECT_GT(first_wait, last_backward);
    return history;
  };
  const auto dp = compiled(), again = compiled();
  for (size_t s = 0; s < one.size(); ++s)
    for (size_t i = 0; i < one[s].size(); ++i) {
      EXPECT_LE(relative_diff(dp[s][i], one[s][i]), 1e-5) << "step " << s << " parameter " << i;
      EXPECT_TRUE(same_on_every_rank(dp[s][i])) << "step " << s << " parameter " << i;
      const std::vector<float> a = dp[s][i].to_vector<float>(), b = again[s][i].to_vector<float>();
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "two runs, step " << s;
    }
}

// Gradient accumulation: two micro-steps of half the rows each, backward on both and one
// average_gradients after the second, give the step of one micro-step on all the rows.
TEST(MpiDataParallel, TwoMicroStepsEqualTheDoubledBatch) {
  constexpr int64_t kRows = 4;  // per rank and micro-step
  const int r = g_group->rank(), n = g_group->size();
  Mlp whole(Generator(9)), micro(Generator(9));
  optim::SGD opt_whole(whole.params(), optim::SGDOptions(0.1)), opt_micro(micro.params(), optim::SGDOptions(0.1));
  const auto bw = dist::plan_buckets(whole.params());
  dist::GradientReducer reducer(micro.params(), g_group, 64, 32);
  for (int step = 0; step < 5; ++step) {
    Generator data(2000 + step);  // per rank: 2·kRows rows
    const Tensor x = normal({2 * kRows * n, 6}, 0, 1, data), t = normal({2 * kRows * n, 3}, 0, 1, data);
    const Tensor xr = slice(x, 0, 2 * kRows * r, 2 * kRows * (r + 1)), tr = slice(t, 0, 2 * kRows * r, 2 * kRows * (r + 1));
    whole.loss(xr, tr).backward();
    dist::average_gradients(whole.params(), bw, *g_group);
    for (int m = 0; m < 2; ++m) {  // each micro-step's loss is half of the mean over both
      reducer.set_enabled(m == 1);   // the reducer runs in the last micro-step's backward only
      mul(micro.loss(slice(xr, 0, m * kRows, (m + 1) * kRows), slice(tr, 0, m * kRows, (m + 1) * kRows)), 0.5)
          .backward();
      EXPECT_EQ(reducer.reduced().size(), m == 1 ? reducer.buckets().size() : 0u);
      reducer.finish();
    }
    opt_whole.step();
    opt_micro.step();
    opt_whole.zero_grad();
    opt_micro.zero_grad();
  }
  for (size_t i = 0; i < whole.params().size(); ++i)
    EXPECT_LE(relative_diff(micro.params()[i], whole.params()[i]), 1e-5) << "parameter " << i;
}

// Ranks initialized apart (another seed each) start equal after broadcast_parameters; the debug
// check names the first parameter that differs, on every rank, before it and after a change.
TEST(MpiDataParallel, BroadcastAtStartAndTheEqualityCheck) {
  Mlp m(Generator(50 + g_group->rank()));
  auto differs_at = [&]() -> std::string {
    try {
      dist::check_parameters_equal(m.params(), *g_group);
    } catch (const ValueError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(differs_at().find("parameter 0 [6, 8] differs from rank 0's on " + std::to_string(g_group->size() - 1) +
                              " rank(s)"),
            std::string::npos);
  dist::broadcast_parameters(m.params(), *g_group);
  EXPECT_EQ(differs_at(), "");
  if (g_group->rank() == g_group->size() - 1) {
    Tensor b = m.params()[3];
    b.data<float>()[0] += 1.0f;
  }
  const std::string last = differs_at();
  EXPECT_NE(last.find("parameter 3 [3] differs from rank 0's on 1 rank(s)"), std::string::npos) << last;
  EXPECT_EQ(last.find("this one among them") != std::string::npos, g_group->rank() == g_group->size() - 1);
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  try {
    tessera::g_group = tessera::dist::mpi_process_group();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_tests: %s\n", e.what());
    return 1;
  }
  const int rc = RUN_ALL_TESTS();
  tessera::g_group.reset();
  return rc;
}
