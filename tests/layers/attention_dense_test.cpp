// nn::MultiHeadAttention's dense path (impl "dense": matmul, causal_softmax, matmul) against the
// block_attention path (impl "block") on the dense causal layout: outputs and gradients of the
// input and every projection parameter (f64 and f32); impl selection; errors for impl "dense";
// dropout on the attention probabilities (the same masks on both paths, drawn from the
// generator, deterministic in eval mode, gradients, compiled steps equal to eager).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/graph/compile.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "layers/layers.h"

namespace tessera {
namespace {

using Kind = nn::AttentionLayoutKind;
using Impl = nn::AttentionImpl;

using testing::all_close;
using testing::expect_error;
using testing::gradcheck;
using testing::parameters_gradcheck;
using testing::test_randn;

// Width 12, 3 heads (D = 4), T = 24 in blocks of 8 (3 attention blocks).
nn::AttentionOptions small(DType dt) { return nn::AttentionOptions(12, 3, 24).block_size(8).dtype(dt); }

struct Grads {
  Tensor y, dx;
  std::vector<Tensor> grads;  // of attn.named_parameters(), in order
};

// y = attn(x, B) and the gradients of L = sum(y ⊙ R) w.r.t. x and every parameter.
Grads run(nn::MultiHeadAttention& attn, const Tensor& x0, int64_t B, const Tensor& R) {
  attn.zero_grad();
  Tensor x = x0.clone().requires_grad_();
  Grads r;
  r.y = attn.forward(x, B);
  sum(mul(r.y, R)).backward();
  r.dx = x.grad();
  for (const auto& p : attn.named_parameters()) r.grads.push_back(p.tensor.grad());
  return r;
}

TEST(AttentionDensePath, EqualsBlockAttention) {
  for (DType dt : {DType::f64, DType::f32}) {
    for (int64_t linear_block : {0, 8}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " linear block " + std::to_string(linear_block));
      // Dense projections: width 12, 3 heads; block-sparse ones (8x8 blocks): width 16, 2 heads.
      const int64_t C = linear_block ? 16 : 12, H = linear_block ? 2 : 3;
      auto opts = [&] {
        return nn::AttentionOptions(C, H, 24)
            .block_size(8)
            .dtype(dt)
            .linear_block_size(linear_block)
            .density(linear_block ? 0.5 : 1.0, 1);
      };
      Generator g1(3), g2(3);  // same parameters
      nn::MultiHeadAttention dense(opts().impl(Impl::dense), g1);
      nn::MultiHeadAttention block(opts().impl(Impl::block), g2);
      ASSERT_TRUE(dense.uses_dense_path(Device::cpu()));
      ASSERT_FALSE(block.uses_dense_path(Device::cpu()));
      for (int64_t B : {1, 3}) {
        Tensor x = test_randn({B * 24, C}, 4, dt), R = test_randn({B * 24, C}, 5, dt);
        const Grads a = run(dense, x, B, R), b = run(block, x, B, R);
        const double rtol = dt == DType::f64 ? 1e-10 : 1e-5, atol = dt == DType::f64 ? 1e-12 : 1e-5;
        EXPECT_TRUE(all_close(a.y, b.y, rtol, atol)) << "y, B " << B;
        EXPECT_TRUE(all_close(a.dx, b.dx, rtol, atol)) << "dx, B " << B;
        const std::vector<nn::NamedParam> names = dense.named_parameters();
        ASSERT_EQ(a.grads.size(), b.grads.size());
        for (size_t i = 0; i < a.grads.size(); ++i)
          EXPECT_TRUE(all_close(a.grads[i], b.grads[i], rtol, atol)) << names[i].name << ", B " << B;
      }
    }
  }
}

TEST(AttentionDensePath, GradientCheck) {
  Generator gen(6);
  nn::MultiHeadAttention attn(small(DType::f64).impl(Impl::dense), gen);
  const int64_t B = 2;
  Tensor x = test_randn({B * 24, 12}, 8);
  EXPECT_TRUE(parameters_gradcheck(attn.named_parameters(), [&] { return attn.forward(x, B); }));
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& a) { return attn.forward(a[0], B); }, {x}));
}

TEST(AttentionDensePath, ImplSelection) {
  Generator gen(7);
  const Device gpu = Device::cuda(0);  // a value only: nothing runs there
  nn::MultiHeadAttention dflt(small(DType::f32), gen);
  EXPECT_EQ(dflt.options().impl(), Impl::automatic);
  EXPECT_FALSE(dflt.uses_dense_path(Device::cpu())) << "auto: block_attention on the CPU";
  EXPECT_FALSE(dflt.uses_dense_path(gpu)) << "auto: block_attention on CUDA, the dense causal layout too";
  nn::MultiHeadAttention dropped(small(DType::f32).attention_dropout(0.1), gen);
  EXPECT_FALSE(dropped.uses_dense_path(gpu)) << "dropout on the probabilities is inside block_attention";
  nn::MultiHeadAttention local(small(DType::f32).layout(Kind::local).window(2).attention_dropout(0.1), gen);
  EXPECT_FALSE(local.uses_dense_path(gpu));
  // An explicit layout that keeps every causal block is the dense causal one.
  nn::MultiHeadAttention given(small(DType::f32).layout(AttentionLayout::dense_causal(24, 8, 3)).impl(Impl::dense),
                              gen);
  EXPECT_TRUE(given.uses_dense_path(Device::cpu()));
  EXPECT_TRUE(given.uses_dense_path(gpu));
  // fixed with summary == stride keeps every causal block too.
  nn::MultiHeadAttention full(small(DType::f32).layout(Kind::fixed).stride(2).summary(2).impl(Impl::dense), gen);
  EXPECT_TRUE(full.uses_dense_path(gpu));
}

TEST(AttentionDensePath, DropoutMasksOfBothPathsAreTheSame) {
  // block_attention's in-kernel mask is the dropout op's on the dense probabilities: the dense
  // path and the fused one give the same outputs and gradients from the same generator state.
  Generator i1(15), i2(15);
  nn::MultiHeadAttention fused(small(DType::f64).attention_dropout(0.3), i1);
  nn::MultiHeadAttention dense(small(DType::f64).attention_dropout(0.3).impl(Impl::dense), i2);
  const int64_t B = 2;
  const Tensor x = test_randn({B * 24, 12}, 16), w = test_randn({B * 24, 12}, 17);
  Generator g1(40), g2(40);
  const Tensor a = fused.forward(x, B, g1), b = dense.forward(x, B, g2);
  EXPECT_TRUE(all_close(a, b, 1e-12, 1e-12));
  EXPECT_EQ(g1.offset(), g2.offset());
  sum(mul(fused.forward(x, B, g1), w)).backward();
  sum(mul(dense.forward(x, B, g2), w)).backward();
  const auto pf = fused.named_parameters(), pd = dense.named_parameters();
  for (size_t i = 0; i < pf.size(); ++i)
    EXPECT_TRUE(all_close(pf[i].tensor.grad(), pd[i].tensor.grad(), 1e-10, 1e-11)) << pf[i].name;
}

TEST(AttentionDensePath, Errors) {
  Generator gen(8);
  expect_error<ValueError>(
      [&] { nn::MultiHeadAttention(small(DType::f32).layout(Kind::local).window(2).impl(Impl::dense), gen); },
      {"MultiHeadAttention", "impl \"dense\"", "dense causal", "local_window"});
  expect_error<ValueError>([&] { nn::attention_impl_from_string("flash"); },
                           {"attention impl", "flash", "auto, block, dense"});
  // strided over 8 blocks leaves blocks out (over 3 blocks of 8 tokens it would keep them all).
  expect_error<ValueError>(
      [&] {
        nn::MultiHeadAttention(
            nn::AttentionOptions(12, 3, 64).block_size(8).layout(Kind::strided).stride(2).impl(Impl::dense),
                               gen);
      },
      {"MultiHeadAttention", "impl \"dense\"", "strided"});
  expect_error<ValueError>([&] { nn::MultiHeadAttention(small(DType::f32).attention_dropout(1.0), gen); },
                           {"MultiHeadAttention", "attention_dropout", "[0, 1)"});
}

TEST(AttentionDensePath, ProbabilityDropoutDrawsFromTheGenerator) {
  Generator init(9);
  nn::MultiHeadAttention attn(small(DType::f32).attention_dropout(0.3), init);  // output dropout 0
  Generator ref_init(9);
  nn::MultiHeadAttention plain(small(DType::f32).impl(Impl::block), ref_init);      // same parameters
  const int64_t B = 2;
  Tensor x = test_randn({B * 24, 12}, 10, DType::f32);
  Generator g(21);
  Tensor a = attn.forward(x, B, g);
  EXPECT_EQ(g.offset(), static_cast<uint64_t>((B * 3 * 24 * 24 + 3) / 4)) << "one draw over the [B*H, T, T] probabilities";
  Tensor b = attn.forward(x, B, g);
  EXPECT_FALSE(all_close(a, b, 1e-6, 1e-6)) << "masks differ per call";
  Generator g_again(21);
  EXPECT_TRUE(all_close(attn.forward(x, B, g_again), a, 0, 0)) << "same generator state, same mask";
  const Tensor want = plain.forward(x, B);
  EXPECT_FALSE(all_close(a, want, 1e-4, 1e-4)) << "training drops probabilities";
  attn.eval();
  Generator e1(1), e2(2);
  Tensor ea = attn.forward(x, B, e1), eb = attn.forward(x, B, e2);
  EXPECT_TRUE(all_close(ea, eb, 0, 0)) << "eval mode is deterministic";
  EXPECT_EQ(e1.offset(), 0u) << "eval draws nothing";
  EXPECT_TRUE(all_close(ea, want, 1e-5, 1e-6)) << "eval mode equals attention without dropout";
}

TEST(AttentionDensePath, ProbabilityDropoutGradients) {
  // With a fixed generator state the mask is fixed: the function is smooth in x and the parameters.
  Generator init(10);
  nn::MultiHeadAttention attn(small(DType::f64).attention_dropout(0.25), init);
  const int64_t B = 2;
  Tensor x = test_randn({B * 24, 12}, 11);
  auto f = [&](const Tensor& in) {
    Generator g(5);
    return attn.forward(in, B, g);
  };
  EXPECT_TRUE(parameters_gradcheck(attn.named_parameters(), [&] { return f(x); }));
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& a) { return f(a[0]); }, {x}));
}

TEST(AttentionDensePath, CompiledStepsMatchEager) {
  // The dense path with probability dropout traced into a compiled step (forward and backward)
  // equals eager steps from the same generator state, step after step.
  Generator i1(12), i2(12);
  nn::MultiHeadAttention eager(small(DType::f32).attention_dropout(0.2).dropout(0.1), i1);
  nn::MultiHeadAttention traced(small(DType::f32).attention_dropout(0.2).dropout(0.1), i2);
  const int64_t B = 2;
  const Tensor R = test_randn({B * 24, 12}, 13, DType::f32);
  const std::map<std::string, Tensor> batch{{"x", test_randn({B * 24, 12}, 14, DType::f32)}};
  Generator ge(31), gt(31);
  auto loss = [&](const nn::MultiHeadAttention& m, const Tensor& x, Generator& g) {
    return sum(mul(m.forward(x, B, g), R));
  };
  auto traced_loss = [&](const std::map<std::string, Tensor>& in) { return loss(traced, in.at("x"), gt); };
  CompiledStep step = compile(traced_loss, traced.named_parameters(), nullptr, batch, &gt);
  for (int s = 0; s < 3; ++s) {
    eager.zero_grad();
    Tensor l = loss(eager, batch.at("x"), ge);
    l.backward();
    ASSERT_EQ(step.run(batch), l.item<double>()) << "step " << s;
    ASSERT_EQ(gt.state(), ge.state()) << "step " << s;
    for (const auto& p : eager.named_parameters())
      EXPECT_TRUE(all_close(step.fetch("grad/" + p.name), p.tensor.grad(), 1e-6, 1e-7)) << p.name << " step " << s;
  }
}

}  // namespace
}  // namespace tessera
