// Compiled training steps on the GPU: the planned arena on the device, the step captured as a
// CUDA graph on its second run and replayed; results equal the eager GPU steps and track the CPU.
#include <gtest/gtest.h>

#include <cmath>

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
    if (s >= 1) EXPECT_TRUE(step.executor().replays_cuda_graph()) << "captured on the second run";
  }
  EXPECT_TRUE(all_close(traced.w2.to(Device::cpu()), eager.w2.to(Device::cpu()), 1e-5, 1e-6));
  EXPECT_EQ(opt_t.step_count(), 12);
}

TEST(CudaCompiledStep, DropoutStepsRunPlainlyWithFreshMasks) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU visible";
  const Device gpu = Device::cuda(0);
  Mlp a(gpu), b(gpu);
  Generator ga(5), gb(5);
  optim::SGD oa(a.tensors(), optim::SGDOptions(0.1)), ob(b.tensors(), optim::SGDOptions(0.1));
  CompiledStep step = compile(
      [&](const Inputs& in) {
        Tensor h = dropout(matmul(index_select(b.emb, in.at("x"), 0), b.w1), 0.3, gb);
        return cross_entropy(matmul(h, b.w2), in.at("y"));
      },
      b.params(), &ob, batch(0), &gb);
  for (int s = 0; s < 4; ++s) {
    const Inputs in = batch(s);
    Tensor h = dropout(matmul(index_select(a.emb, in.at("x").to(gpu), 0), a.w1), 0.3, ga);
    Tensor l = cross_entropy(matmul(h, a.w2), in.at("y").to(gpu));
    l.backward();
    oa.step();
    oa.zero_grad();
    const double lt = step.run(in);
    ASSERT_NEAR(lt, l.item<double>(), 1e-6 * std::abs(lt)) << "step " << s << ": the same masks as eager";
    EXPECT_FALSE(step.executor().replays_cuda_graph());
  }
}

}  // namespace
}  // namespace tessera
