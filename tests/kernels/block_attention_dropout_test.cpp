// Dropout on the probabilities inside block_attention (CPU reference kernels): the mask is the
// `dropout` op's on the dense probabilities drawn from the same generator state, for every
// layout kind; gradients equal those of dropout(softmax) · V and pass an f64 gradient check;
// the Philox base input shifts the stream; the op draws only with p > 0; bad arguments fail.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/graph/compile.h"
#include "attention_masks.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::excluded_mask;
using testing::expect_error;
using testing::gradcheck;
using testing::test_randn;

// dropout(softmax(masked scale · Q·Kᵀ), p, gen) · V from ops: the dense reference.
Tensor dense_dropout_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayout& l,
                               double p, Generator& gen) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const std::vector<int64_t> flat{B * H, T, D};
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Tensor scores = reshape(mul(matmul(reshape(q, flat), reshape(k, flat), false, true), scale), {B, H, T, T});
  Tensor probs = dropout(softmax(masked_fill(scores, excluded_mask(l), -INFINITY)), p, gen);
  return reshape(matmul(reshape(probs, {B * H, T, T}), reshape(v, flat)), {B, H, T, D});
}

std::vector<AttentionLayoutPtr> layouts() {
  return {AttentionLayout::dense_causal(64, 8, 2), AttentionLayout::local_window(64, 8, 2, 3),
          AttentionLayout::strided(64, 16, 2, 2), AttentionLayout::fixed(64, 8, 2, 4, 2)};
}

TEST(BlockAttentionDropout, MaskIsTheDropoutOpsOnTheDenseProbabilities) {
  uint64_t seed = 100;
  for (const AttentionLayoutPtr& l : layouts())
    for (double p : {0.1, 0.5}) {
      const Shape s{3, 2, 64, 5};  // odd batch, odd head dim
      const std::vector<Tensor> in{test_randn(s, seed), test_randn(s, seed + 1), test_randn(s, seed + 2)};
      seed += 3;
      Generator a(77), b(77);
      a.reserve(5), b.reserve(5);  // not at the stream's start
      const Tensor got = block_attention(in[0], in[1], in[2], l, 0, p, a);
      const Tensor want = dense_dropout_attention(in[0], in[1], in[2], *l, p, b);
      EXPECT_EQ(a.offset(), b.offset()) << "the same share of the stream, " << l->str();
      EXPECT_TRUE(all_close(got, want, 1e-12, 1e-12)) << l->str() << " p " << p;
      // Gradients: the same function of (q, k, v) on both sides (each draw from a copy of one state).
      const Tensor w = test_randn(s, seed + 50);
      auto grads = [&](bool sparse) {
        std::vector<Tensor> x;
        for (const Tensor& t : in) x.push_back(t.clone().requires_grad_());
        Generator gen(91);
        const Tensor o = sparse ? block_attention(x[0], x[1], x[2], l, 0, p, gen)
                                : dense_dropout_attention(x[0], x[1], x[2], *l, p, gen);
        sum(mul(o, w)).backward();
        return std::vector<Tensor>{x[0].grad(), x[1].grad(), x[2].grad()};
      };
      const std::vector<Tensor> gs = grads(true), gd = grads(false);
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_close(gs[i], gd[i], 1e-10, 1e-11)) << l->str() << " d" << i;
    }
}

TEST(BlockAttentionDropout, Gradcheck) {
  // A fixed stream (attributes): the function gradcheck differentiates is deterministic.
  for (const AttentionLayoutPtr& l : {AttentionLayout::dense_causal(32, 8, 2), AttentionLayout::strided(32, 8, 2, 2)}) {
    const op::BlockAttention::Attrs attrs{l, 0, 0.3, 5, 40};
    const Shape s{2, 2, 32, 4};
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) { return call<op::BlockAttention>(attrs, t)[0]; },
                          {test_randn(s, 1), test_randn(s, 2), test_randn(s, 3)}))
        << l->str();
  }
}

TEST(BlockAttentionDropout, PhiloxBaseShiftsTheStream) {
  const AttentionLayoutPtr l = AttentionLayout::local_window(32, 8, 2, 2);
  const Shape s{1, 2, 32, 4};
  const std::vector<Tensor> in{test_randn(s, 1), test_randn(s, 2), test_randn(s, 3)};
  const Tensor shifted = call<op::BlockAttention>({l, 0, 0.25, 9, 7 + 1000}, in)[0];
  const Tensor based = call<op::BlockAttention>({l, 0, 0.25, 9, 7}, {in[0], in[1], in[2], philox_base(1000)})[0];
  EXPECT_EQ(shifted.to_vector<double>(), based.to_vector<double>());
  EXPECT_NE(call<op::BlockAttention>({l, 0, 0.25, 9, 7}, in)[0].to_vector<double>(), based.to_vector<double>());
  // Backward reads the same base: gradients of the based and the shifted forms agree.
  auto grad_q = [&](bool with_base) {
    Tensor q = in[0].clone().requires_grad_();
    std::vector<Tensor> args{q, in[1], in[2]};
    if (with_base) args.push_back(philox_base(1000));
    call<op::BlockAttention>({l, 0, 0.25, 9, with_base ? 7u : 1007u}, args)[0].backward(test_randn(s, 4));
    return q.grad().to_vector<double>();
  };
  EXPECT_EQ(grad_q(true), grad_q(false));
}

TEST(BlockAttentionDropout, DrawsOnlyWithDropout) {
  const AttentionLayoutPtr l = AttentionLayout::dense_causal(16, 8, 1);
  Generator gen(3);
  const uint64_t at = gen.offset();
  const Tensor x = test_randn({1, 1, 16, 4}, 1);
  block_attention(x, x, x, l, 0, 0, gen);
  EXPECT_EQ(gen.offset(), at) << "p = 0 reserves nothing";
  block_attention(x, x, x, l, 0, 0.5, gen);
  EXPECT_EQ(gen.offset(), at + 16 * 16 / 4) << "B·H·T·T / 4 blocks, as dropout on [1, 1, 16, 16]";
  // Without dropout the op is an ordinary one: a compiled step needs no generator for it.
  Tensor w = test_randn({1, 1, 16, 4}, 2).requires_grad_();
  CompiledStep plain = compile([&](const std::map<std::string, Tensor>& in) {
    return sum(block_attention(mul(in.at("x"), w), in.at("x"), in.at("x"), l));
  }, std::vector<Tensor>{w}, nullptr, {{"x", x}});
  EXPECT_NO_THROW(plain.run({{"x", x}}));
}

TEST(BlockAttentionDropout, CompiledStepsDrawWhatEagerStepsDraw) {
  const AttentionLayoutPtr l = AttentionLayout::strided(32, 8, 2, 2);
  const Tensor x = test_randn({2, 2, 32, 4}, 1);
  Tensor w = test_randn({2, 2, 32, 4}, 2).requires_grad_();
  Generator eager_gen(12), compiled_gen(12);
  auto loss = [&](const Tensor& in, Generator& gen) {
    return sum(mul(block_attention(mul(in, w), in, in, l, 0, 0.4, gen), in));
  };
  CompiledStep step = compile([&](const std::map<std::string, Tensor>& in) { return loss(in.at("x"), compiled_gen); },
                              std::vector<Tensor>{w}, nullptr, {{"x", x}}, &compiled_gen);
  for (int run = 0; run < 3; ++run) {  // the stream moves on between runs, the same way on both sides
    w.zero_grad();
    Tensor l_eager = loss(x, eager_gen);
    l_eager.backward();
    const std::vector<double> g_eager = w.grad().to_vector<double>();
    const double l_compiled = step.run({{"x", x}});
    EXPECT_NEAR(l_compiled, l_eager.item<double>(), 1e-12) << "run " << run;
    EXPECT_TRUE(all_close(step.fetch("grad/0"), from_vector(g_eager, w.shape()), 1e-12, 1e-12)) << "run " << run;
    EXPECT_EQ(compiled_gen.offset(), eager_gen.offset());
  }
}

TEST(BlockAttentionDropout, Errors) {
  const AttentionLayoutPtr l = AttentionLayout::dense_causal(16, 8, 1);
  const Tensor x = test_randn({1, 1, 16, 4}, 1);
  expect_error<ValueError>([&] { block_attention(x, x, x, l, 0, 1.0); }, {"block_attention", "dropout", "[0, 1)"});
  expect_error<ValueError>([&] { block_attention(x, x, x, l, 0, -0.1); }, {"block_attention", "dropout"});
  expect_error<ValueError>([&] { call<op::BlockAttention>({l, 0, 0, 1, 0}, {x, x, x, philox_base(0)}); },
                           {"block_attention", "Philox base", "dropout is 0"});
  expect_error<DTypeError>([&] { call<op::BlockAttention>({l, 0, 0.1, 1, 0}, {x, x, x, zeros({2}, DType::f32)}); },
                           {"block_attention", "i32[2]"});
  expect_error<ValueError>([&] { call<op::BlockAttention>({l, 0, 0.1, 1, 0}, {x, x}); },
                           {"block_attention", "3 or 4 inputs"});
}

}  // namespace
}  // namespace tessera
