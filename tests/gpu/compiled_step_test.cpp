// Compiled training steps on the GPU: the planned arena on the device, the step captured as a
// CUDA graph on its second run and replayed (also with dropout); results equal the eager GPU
// steps and track the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/graph/compile.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::test_randn;
using Inputs = std::map<std::string, Tensor>;

struct Mlp {
  Tensor emb, w1, b1, w2;
  explicit Mlp(Device dev) {
    emb = test_randn({17, 24}, 1, DType::f32).to(dev).detach().requires_grad_();
    w1 = mul(test_randn({24, 48}, 2, DType::f32), 0.2).to(dev).detach().requires_grad_();
    b1 = test_randn({48}, 3, DType::f32).to(dev).detach().requires_grad_();
    w2 = mul(test_randn({48, 17}, 4, DType::f32), 0.2).to(dev).detach().requires_grad_();
  }
  std::vector<graph::NamedParam> params() const { return {{"emb", emb}, {"w1", w1}, {"b1", b1}, {"w2", w2}}; }
  std::vector<Tensor> tensors() const { return {emb, w1, b1, w2}; }
  Tensor loss(const Inputs& in) const {
    Tensor h = layer_norm(gelu(add(matmul(index_select(emb, in.at("x"), 0), w1), b1)));
    return cross_entropy(matmul(h, w2), in.at("y"));
  }
};

Inputs batch(int step) {
  std::vector<int32_t> x(40), y(40);
  for (int i = 0; i < 40; ++i) x[i] = (i * 7 + step * 5) % 17, y[i] = (i * 3 + step) % 17;
  return {{"x", from_vector(x, {40})}, {"y", from_vector(y, {40})}};
}

// Whether compiled steps capture CUDA graphs (TESSERA_CUDA_GRAPHS=0 runs them plainly: the
// results must be the same, so the suite also runs that way).
bool graphs_on() {
  const char* e = std::getenv("TESSERA_CUDA_GRAPHS");
  return !(e && std::strcmp(e, "0") == 0);
}

Inputs on(const Inputs& in, Device dev) {
  Inputs out;
  for (const auto& [k, v] : in) out[k] = v.to(dev);
  return out;
}

TEST(CudaCompiledStep, ReplaysACudaGraphAndEqualsTheEagerGpuSteps) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU visible";
  const Device gpu = Device::cuda(0);
  Mlp eager(gpu), traced(gpu), cpu(Device::cpu());
  const auto options = optim::AdamWOptions(3e-2).weight_decay(0.1);
  optim::AdamW opt_e(eager.tensors(), options), opt_t(traced.tensors(), options), opt_c(cpu.tensors(), options);
  for (optim::Optimizer* o : {static_cast<optim::Optimizer*>(&opt_e), static_cast<optim::Optimizer*>(&opt_t),
                              static_cast<optim::Optimizer*>(&opt_c)})
    o->set_clip_norm(1.0);
  CompiledStep step = compile([&](const Inputs& in) { return traced.loss(in); }, traced.params(), &opt_t, batch(0));
  EXPECT_EQ(step.executor().device(), gpu);
  for (int s = 0; s < 12; ++s) {
    const double lr = s < 6 ? 3e-2 : 1e-2;  // a schedule: fed each run, no re-capture
    opt_e.set_lr(lr), opt_t.set_lr(lr), opt_c.set_lr(lr);
    const Inputs b = batch(s);
    Tensor le = eager.loss(on(b, gpu));
    le.backward();
    opt_e.step();
    opt_e.zero_grad();
    Tensor lc = cpu.loss(b);
    lc.backward();
    opt_c.step();
    opt_c.zero_grad();
    const double lt = step.run(b);  // CPU batches, copied to the device
    // The same kernels; cuBLAS may pick another algorithm for other buffer alignments, so not bitwise.
    ASSERT_NEAR(lt, le.item<double>(), 1e-6 * std::abs(lt)) << "step " << s;
    ASSERT_NEAR(lt, lc.item<double>(), 1e-4 * std::abs(lc.item<double>())) << "step " << s;
    if (s >= 1) EXPECT_EQ(step.executor().replays_cuda_graph(), graphs_on()) << "captured on the second run";
  }
  EXPECT_TRUE(all_close(traced.w2.to(Device::cpu()), eager.w2.to(Device::cpu()), 1e-5, 1e-6));
  EXPECT_EQ(opt_t.step_count(), 12);
}

// Steps with dropout replay a CUDA graph too: the nodes read the Philox base from a device input
// written before each launch, so every replay draws fresh masks, equal to eager's draw for draw
// (forward, backward and the recomputed copy of a checkpointed region).
TEST(CudaCompiledStep, DropoutStepsReplayACudaGraphWithFreshMasks) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU visible";
  const Device gpu = Device::cuda(0);
  Mlp a(gpu), b(gpu);
  Generator ga(5, 7), gb(5, 7);
  optim::SGD oa(a.tensors(), optim::SGDOptions(0.1)), ob(b.tensors(), optim::SGDOptions(0.1));
  auto loss = [](const Mlp& m, const Inputs& in, Generator& gen) {
    Tensor h = graph::recompute([&] {  // a checkpointed region: its dropout is drawn again before backward
      return dropout(gelu(matmul(index_select(m.emb, in.at("x"), 0), m.w1)), 0.3, gen);
    });
    return cross_entropy(dropout(matmul(h, m.w2), 0.2, gen), in.at("y"));
  };
  CompiledStep step = compile([&](const Inputs& in) { return loss(b, in, gb); }, b.params(), &ob, batch(0), &gb);
  for (int s = 0; s < 8; ++s) {
    const Inputs in = batch(s);
    Tensor l = loss(a, on(in, gpu), ga);
    l.backward();
    oa.step();
    oa.zero_grad();
    const double lt = step.run(in);
    ASSERT_NEAR(lt, l.item<double>(), 1e-6 * std::abs(lt)) << "step " << s << ": the same masks as eager";
    ASSERT_EQ(gb.state(), ga.state()) << "step " << s;
    if (s >= 1) EXPECT_EQ(step.executor().replays_cuda_graph(), graphs_on()) << "captured on run 2; step " << s;
  }
  EXPECT_TRUE(all_close(b.w1.to(Device::cpu()), a.w1.to(Device::cpu()), 1e-5, 1e-6));
  EXPECT_TRUE(all_close(b.emb.to(Device::cpu()), a.emb.to(Device::cpu()), 1e-5, 1e-6));

  // Without an update the parameters stay: replays of one batch differ only by their masks, and
  // rewinding the generator to a replay's share draws that replay's masks again, bit for bit.
  Mlp c(gpu);
  Generator gc(5, 7);
  CompiledStep fixed = compile([&](const Inputs& in) { return loss(c, in, gc); }, c.params(), nullptr, batch(0), &gc);
  std::vector<double> runs;
  for (int s = 0; s < 4; ++s) {
    runs.push_back(fixed.run(batch(0)));
    for (int k = 0; k < s; ++k) EXPECT_NE(runs[s], runs[k]) << "runs " << k << " and " << s << ": the same masks";
  }
  EXPECT_EQ(fixed.executor().replays_cuda_graph(), graphs_on());
  const uint64_t share = fixed.executor().graph().random_blocks;
  gc.set_state({5, 7 + 2 * share});
  EXPECT_EQ(fixed.run(batch(0)), runs[2]);
  EXPECT_EQ(fixed.run(batch(0)), runs[3]);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// CompiledStep::profile on the GPU: a plain run between replays of the captured graph, timed by
// CUDA events around each node; the same losses and updates as a twin that only replays (within
// 1e-6: cuBLAS may choose its algorithm otherwise when not captured), every node counted once,
// times positive for the matmuls, and the replays go on after it.
TEST(CudaCompiledStep, ProfileIsAStepTimedByOpBetweenReplays) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU visible";
  const Device gpu = Device::cuda(0);
  Mlp a(gpu), b(gpu);
  optim::AdamW oa(a.tensors()), ob(b.tensors());
  CompiledStep sa = compile([&](const Inputs& in) { return a.loss(in); }, a.params(), &oa, batch(0));
  CompiledStep sb = compile([&](const Inputs& in) { return b.loss(in); }, b.params(), &ob, batch(0));
  auto near = [](double x, double y) { return std::abs(x - y) <= 1e-6 * std::abs(y); };
  for (int s = 0; s < 3; ++s) ASSERT_EQ(sa.run(batch(s)), sb.run(batch(s))) << "step " << s;
  const std::vector<OpTime> prof = sb.profile(batch(3));
  EXPECT_TRUE(near(sb.fetch("loss").item<double>(), sa.run(batch(3))));
  for (int s = 4; s < 6; ++s) EXPECT_TRUE(near(sb.run(batch(s)), sa.run(batch(s)))) << "step " << s;
  EXPECT_EQ(sb.executor().replays_cuda_graph(), graphs_on());
  EXPECT_EQ(ob.step_count(), 6);
  EXPECT_TRUE(all_close(b.w1.to(Device::cpu()), a.w1.to(Device::cpu()), 1e-5, 1e-6));
  int counted = 0, ran = 0;
  for (bool skip : sb.executor().plan().skip) ran += skip ? 0 : 1;
  for (const OpTime& t : prof) {
    EXPECT_GE(t.ms, 0.0) << t.op;
    if (t.op != "(write-backs)") counted += t.nodes;
    if (t.op == "matmul") EXPECT_GT(t.ms, 0.0);
  }
  EXPECT_EQ(counted, ran);
}

}  // namespace
}  // namespace tessera
