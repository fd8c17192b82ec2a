// nn::MultiHeadAttention on CUDA (label `gpu`; skipped visibly without a GPU): the "auto" impl
// takes the dense path there (matmul, causal_softmax, matmul) and equals the CPU's block_attention
// path (outputs, input and parameter gradients; f32 and f64; bf16/f16 outputs); dropout on the
// attention probabilities draws the CPU's masks from the same generator state; a compiled step
// (captured as a CUDA graph) equals the eager GPU steps.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/graph/compile.h"
#include "gpu_check.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "layers/layers.h"

namespace tessera {
namespace {

using namespace gpu_test;

using testing::all_close;
using testing::test_randn;

// Width 48, 3 heads (D = 16), T = 40 in blocks of 8.
constexpr int64_t kC = 48, kH = 3, kT = 40, kB = 3;
nn::AttentionOptions opts(DType dt) { return nn::AttentionOptions(kC, kH, kT).block_size(8).dtype(dt); }

struct Result {
  Tensor y, dx;
  std::vector<Tensor> grads;  // of named_parameters(), in order; all on the CPU
};

// y = attn(x, B) and the gradients of sum(y ⊙ R), on the module's device (x, R given on the CPU).
Result run(nn::MultiHeadAttention& attn, Device dev, const Tensor& x0, const Tensor& R, Generator& gen) {
  attn.zero_grad();
  Tensor x = x0.to(dev).detach().requires_grad_();
  Tensor y = attn.forward(x, kB, gen);
  sum(mul(y, R.to(dev))).backward();
  Result r{y.to(Device::cpu()), x.grad().to(Device::cpu()), {}};
  for (const auto& p : attn.named_parameters()) r.grads.push_back(p.tensor.grad().to(Device::cpu()));
  return r;
}

void expect_same(const Result& gpu, const Result& cpu, const nn::MultiHeadAttention& attn, double rtol,
                 double atol) {
  EXPECT_TRUE(all_close(gpu.y, cpu.y, rtol, atol)) << "y";
  EXPECT_TRUE(all_close(gpu.dx, cpu.dx, rtol, atol)) << "dx";
  const std::vector<nn::NamedParam> names = attn.named_parameters();
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  for (size_t i = 0; i < gpu.grads.size(); ++i)
    EXPECT_TRUE(all_close(gpu.grads[i], cpu.grads[i], rtol, atol)) << names[i].name;
}

TEST(CudaAttentionDensePath, AutoOnCudaEqualsCpuBlockAttention) {
  REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    Generator i1(1), i2(1);  // same parameters
    nn::MultiHeadAttention cpu(opts(dt), i1), gpu(opts(dt), i2);
    gpu.to(kGpu);
    ASSERT_FALSE(cpu.uses_dense_path(Device::cpu()));
    ASSERT_TRUE(gpu.uses_dense_path(kGpu));
    const Tensor x = test_randn({kB * kT, kC}, 2, dt), R = test_randn({kB * kT, kC}, 3, dt);
    Generator g1(0), g2(0);
    const double rtol = dt == DType::f64 ? 1e-10 : 1e-4, atol = dt == DType::f64 ? 1e-11 : 1e-4;
    expect_same(run(gpu, kGpu, x, R, g1), run(cpu, Device::cpu(), x, R, g2), gpu, rtol, atol);
  }
}

TEST(CudaAttentionDensePath, HalfDtypesTrackTheCpu) {
  REQUIRE_GPU();
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    Generator i1(4), i2(4);
    nn::MultiHeadAttention cpu(opts(dt), i1), gpu(opts(dt), i2);
    gpu.to(kGpu);
    const Tensor x = cast(test_randn({kB * kT, kC}, 5, DType::f32), dt);
    const Tensor want = cast(cpu.forward(x, kB), DType::f64);  // block_attention, f32 inside
    const Tensor got = cast(gpu.forward(x.to(kGpu), kB).to(Device::cpu()), DType::f64);  // dense, half GEMMs
    // Scores and probabilities are rounded to the half dtype on the dense path: a few 1e-3 relative.
    const std::vector<double> w = want.to_vector<double>();
    double rms = 0;
    for (double v : w) rms += v * v;
    rms = std::sqrt(rms / static_cast<double>(w.size()));
    EXPECT_TRUE(all_close(got, want, 0.05, 0.05 * rms));
  }
}

TEST(CudaAttentionDensePath, ProbabilityDropoutMatchesTheCpu) {
  REQUIRE_GPU();
  // The CPU takes the dense path too (attention_dropout > 0); Philox masks are the same on every
  // device for one generator state.
  Generator i1(6), i2(6);
  nn::MultiHeadAttention cpu(opts(DType::f32).attention_dropout(0.2), i1),
      gpu(opts(DType::f32).attention_dropout(0.2), i2);
  gpu.to(kGpu);
  ASSERT_TRUE(cpu.uses_dense_path(Device::cpu()));
  const Tensor x = test_randn({kB * kT, kC}, 7, DType::f32), R = test_randn({kB * kT, kC}, 8, DType::f32);
  Generator g1(9), g2(9);
  expect_same(run(gpu, kGpu, x, R, g1), run(cpu, Device::cpu(), x, R, g2), gpu, 1e-4, 1e-4);
  EXPECT_EQ(g1.state(), g2.state());
}

TEST(CudaAttentionDensePath, CompiledStepEqualsEagerGpuSteps) {
  REQUIRE_GPU();
  Generator i1(10), i2(10);
  nn::MultiHeadAttention eager(opts(DType::f32).attention_dropout(0.1), i1),
      traced(opts(DType::f32).attention_dropout(0.1), i2);
  eager.to(kGpu);
  traced.to(kGpu);
  const Tensor R = test_randn({kB * kT, kC}, 11, DType::f32).to(kGpu);
  const std::map<std::string, Tensor> batch{{"x", test_randn({kB * kT, kC}, 12, DType::f32).to(kGpu)}};
  Generator ge(13), gt(13);
  auto loss = [&](const nn::MultiHeadAttention& m, const Tensor& x, Generator& g) {
    return sum(mul(m.forward(x, kB, g), R));
  };
  auto traced_loss = [&](const std::map<std::string, Tensor>& in) { return loss(traced, in.at("x"), gt); };
  CompiledStep step = compile(traced_loss, traced.named_parameters(), nullptr, batch, &gt);
  for (int s = 0; s < 3; ++s) {  // the second run captures the CUDA graph, the third replays it
    eager.zero_grad();
    Tensor l = loss(eager, batch.at("x"), ge);
    l.backward();
    const double want = l.item<double>();
    EXPECT_NEAR(step.run(batch), want, 1e-5 * std::abs(want) + 1e-6) << "step " << s;
    for (const auto& p : eager.named_parameters())
      EXPECT_TRUE(
          all_close(step.fetch("grad/" + p.name).to(Device::cpu()), p.tensor.grad().to(Device::cpu()), 1e-5, 1e-6))
          << p.name << " step " << s;
  }
}

}  // namespace
}  // namespace tessera
