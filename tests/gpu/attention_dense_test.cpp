// nn::MultiHeadAttention on CUDA (label `gpu`; skipped visibly without a GPU): both impls there
// ("auto": block_attention for the dense causal layout too; "dense": matmul, causal_softmax,
// matmul) equal the CPU's block_attention path, with and without qk_norm (outputs, input and
// parameter gradients; f32 and f64; bf16/f16 outputs); dropout on the attention probabilities
// draws the CPU's masks from the same generator state on both; a compiled step (captured as a
// CUDA graph, the Philox base fed per run) equals the eager GPU steps, on the scalar kernels (f32)
// and the tensor-core ones (bf16).
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

TEST(CudaAttentionDensePath, EveryImplOnCudaEqualsCpuBlockAttention) {
  REQUIRE_GPU();
  for (const char* impl : {"auto", "dense"})
  for (DType dt : {DType::f32, DType::f64})
  for (bool qk : {false, true}) {  // qk: LayerNorm on the queries and keys
    SCOPED_TRACE(std::string(impl) + " " + dtype_name(dt) + (qk ? " qk_norm" : ""));
    Generator i1(1), i2(1);  // same parameters
    nn::MultiHeadAttention cpu(opts(dt).qk_norm(qk), i1),
        gpu(opts(dt).qk_norm(qk).impl(nn::attention_impl_from_string(impl)), i2);
    gpu.to(kGpu);
    ASSERT_FALSE(cpu.uses_dense_path(Device::cpu()));
    ASSERT_EQ(gpu.uses_dense_path(kGpu), std::string(impl) == "dense");
    const Tensor x = test_randn({kB * kT, kC}, 2, dt), R = test_randn({kB * kT, kC}, 3, dt);
    Generator g1(0), g2(0);
    const double rtol = dt == DType::f64 ? 1e-10 : 1e-4, atol = dt == DType::f64 ? 1e-11 : 1e-4;
    expect_same(run(gpu, kGpu, x, R, g1), run(cpu, Device::cpu(), x, R, g2), gpu, rtol, atol);
  }
}

TEST(CudaAttentionDensePath, HalfDtypesTrackTheCpu) {
  REQUIRE_GPU();
  for (const char* impl : {"auto", "dense"})
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(impl) + " " + dtype_name(dt));
    Generator i1(4), i2(4);
    nn::MultiHeadAttention cpu(opts(dt), i1), gpu(opts(dt).impl(nn::attention_impl_from_string(impl)), i2);
    gpu.to(kGpu);
    const Tensor x = cast(test_randn({kB * kT, kC}, 5, DType::f32), dt);
    const Tensor want = cast(cpu.forward(x, kB), DType::f64);  // block_attention, f32 inside
    const Tensor got = cast(gpu.forward(x.to(kGpu), kB).to(Device::cpu()), DType::f64);
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
  // Philox masks are the same on every device for one generator state, on both paths.
  for (const char* impl : {"auto", "dense"}) {
    SCOPED_TRACE(impl);
    Generator i1(6), i2(6);
    nn::MultiHeadAttention cpu(opts(DType::f32).attention_dropout(0.2), i1),
        gpu(opts(DType::f32).attention_dropout(0.2).impl(nn::attention_impl_from_string(impl)), i2);
    gpu.to(kGpu);
    const Tensor x = test_randn({kB * kT, kC}, 7, DType::f32), R = test_randn({kB * kT, kC}, 8, DType::f32);
    Generator g1(9), g2(9);
    expect_same(run(gpu, kGpu, x, R, g1), run(cpu, Device::cpu(), x, R, g2), gpu, 1e-4, 1e-4);
    EXPECT_EQ(g1.state(), g2.state());
  }
}

// A compiled step of `options` (dropout on the probabilities and the output) against eager steps
// on the GPU from the same generator state, three steps: the second run captures the CUDA graph,
// the third replays it with a new Philox base.
void expect_compiled_equals_eager(const nn::AttentionOptions& options, int64_t B, double rtol) {
  Generator i1(10), i2(10);
  nn::MultiHeadAttention eager(options, i1), traced(options, i2);
  eager.to(kGpu);
  traced.to(kGpu);
  const int64_t T = options.seq_len(), C = options.width();
  const Tensor R = test_randn({B * T, C}, 11, DType::f32).to(kGpu);
  const std::map<std::string, Tensor> batch{{"x", cast(test_randn({B * T, C}, 12), options.dtype()).to(kGpu)}};
  Generator ge(13), gt(13);
  auto loss = [&](const nn::MultiHeadAttention& m, const Tensor& x, Generator& g) {
    return sum(mul(cast(m.forward(x, B, g), DType::f32), R));
  };
  auto traced_loss = [&](const std::map<std::string, Tensor>& in) { return loss(traced, in.at("x"), gt); };
  CompiledStep step = compile(traced_loss, traced.named_parameters(), nullptr, batch, &gt);
  for (int s = 0; s < 3; ++s) {
    eager.zero_grad();
    Tensor l = loss(eager, batch.at("x"), ge);
    l.backward();
    const double want = l.item<double>();
    EXPECT_NEAR(step.run(batch), want, rtol * std::abs(want) + 1e-6) << "step " << s;
    EXPECT_EQ(gt.state(), ge.state()) << "step " << s;
    for (const auto& p : eager.named_parameters()) {
      const Tensor got = cast(step.fetch("grad/" + p.name).to(Device::cpu()), DType::f64);
      const Tensor ref = cast(p.tensor.grad().to(Device::cpu()), DType::f64);
      EXPECT_TRUE(close_to(got, ref, rtol)) << p.name << " step " << s;
    }
  }
}

TEST(CudaAttentionDensePath, CompiledStepEqualsEagerGpuSteps) {
  REQUIRE_GPU();
  for (const char* impl : {"auto", "dense"}) {
    SCOPED_TRACE(impl);
    expect_compiled_equals_eager(
        opts(DType::f32).attention_dropout(0.1).dropout(0.1).impl(nn::attention_impl_from_string(impl)), kB, 1e-5);
  }
  // bf16, head dim 32 and blocks of 32: block_attention's tensor-core kernels with their dropout.
  SCOPED_TRACE("bf16 tensor cores");
  expect_compiled_equals_eager(
      nn::AttentionOptions(96, 3, 96).block_size(32).dtype(DType::bf16).attention_dropout(0.2).dropout(0.1), 2, 1e-2);
}

}  // namespace
}  // namespace tessera
