// Autocast: matmul, bsmm and block_attention take f32 operands in bf16/f16 under a guard,
// return f32, and give f32 gradients computed in the forward's dtypes.
#include "core/autocast.h"

#include <gtest/gtest.h>

#include "core/graph/compile.h"
#include "core/sparse/generators.h"
#include "kernels/ops.h"
#include "optim/optim.h"
#include "tests/support/gradcheck.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
using testing::test_randn;

Tensor randn32(const Shape& s, uint64_t seed) { return test_randn(s, seed, DType::f32); }

TEST(Autocast, GuardNestsAndRestores) {
  EXPECT_FALSE(autocast::enabled());
  {
    autocast::Guard a(DType::bf16);
    EXPECT_EQ(autocast::dtype(), DType::bf16);
    {
      autocast::Guard off(DType::f32);
      EXPECT_FALSE(autocast::enabled());
      autocast::Guard h(DType::f16);
      EXPECT_EQ(autocast::dtype(), DType::f16);
    }
    EXPECT_EQ(autocast::dtype(), DType::bf16);
  }
  EXPECT_EQ(autocast::dtype(), DType::f32);
  expect_error<ValueError>([] { autocast::Guard g(DType::i32); }, {"autocast", "i32"});
  expect_error<ValueError>([] { autocast::Guard g(DType::f64); }, {"autocast", "f64"});
}

// Under the guard: C = (bf16(A)·bf16(B)) summed in f32, returned f32; the same numbers as the
// explicit low-precision product with an f32 output, and close to the f32 product.
TEST(Autocast, MatmulComputesInLowPrecisionReturnsF32) {
  for (DType low : {DType::bf16, DType::f16}) {
    for (bool tb : {false, true}) {
      Tensor a = randn32({7, 13}, 1), b = randn32(tb ? Shape{5, 13} : Shape{13, 5}, 2);
      Tensor c;
      {
        autocast::Guard g(low);
        c = matmul(a, b, false, tb);
      }
      EXPECT_EQ(c.dtype(), DType::f32);
      Tensor want = call<op::Matmul>({false, tb, true}, {cast(a, low), cast(b, low)})[0];
      EXPECT_TRUE(all_close(c, want, 0, 0));
      EXPECT_TRUE(all_close(c, matmul(a, b, false, tb), 2e-2, 5e-2));
      // Rounding the operands is visible: the f32 product differs somewhere.
      EXPECT_FALSE(all_close(c, matmul(a, b, false, tb), 0, 0));
    }
  }
}

TEST(Autocast, MatmulGradientsAreF32FromLowPrecisionProducts) {
  Tensor a = randn32({6, 9}, 3).requires_grad_(), b = randn32({9, 4}, 4).requires_grad_();
  Tensor r = randn32({6, 4}, 5);
  {
    autocast::Guard g(DType::bf16);
    sum(mul(matmul(a, b), r)).backward();  // backward inside the guard: autocast is off there
  }
  ASSERT_EQ(a.grad().dtype(), DType::f32);
  ASSERT_EQ(b.grad().dtype(), DType::f32);
  // dA = f32(bf16(R)·bf16(B)ᵀ rounded to bf16), as the activations' gradients are rounded; b,
  // the weight side, reaches the product as a bf16 cast of an f32 tensor: dB is the f32 sums of
  // the bf16 products, never rounded to bf16 (op::Matmul::backward's matmul_grad).
  Tensor r16 = cast(r, DType::bf16), a16 = cast(a.detach(), DType::bf16), b16 = cast(b.detach(), DType::bf16);
  const Tensor want_a = cast(matmul(r16, b16, false, true), DType::f32);
  const Tensor want_b = call<op::Matmul>({true, false, true}, {a16, r16})[0];
  EXPECT_TRUE(all_close(a.grad(), want_a, 0, 0));
  EXPECT_TRUE(all_close(b.grad(), want_b, 0, 0));
  EXPECT_FALSE(all_close(b.grad(), cast(cast(want_b, DType::bf16), DType::f32), 0, 0)) << "not rounded to bf16";
}

TEST(Autocast, OnlyF32OperandsAreCast) {
  autocast::Guard g(DType::bf16);
  Tensor a64 = test_randn({3, 4}, 1), b64 = test_randn({4, 2}, 2);
  EXPECT_EQ(matmul(a64, b64).dtype(), DType::f64);  // f64 (gradient checks) is left alone
  Tensor a16 = cast(a64, DType::bf16), b16 = cast(b64, DType::bf16);
  EXPECT_EQ(matmul(a16, b16).dtype(), DType::bf16);  // explicit bf16 stays bf16
  // Mixed bf16 and f32 operands: the f32 one is cast, the result is f32.
  Tensor b32 = cast(b64, DType::f32);
  Tensor mixed = matmul(a16, b32);
  EXPECT_EQ(mixed.dtype(), DType::f32);
  EXPECT_TRUE(all_close(mixed, call<op::Matmul>({false, false, true}, {a16, cast(b32, DType::bf16)})[0], 0, 0));
  // f16 operands under a bf16 guard are not the guard's dtype: left alone (a dtype error).
  expect_error<DTypeError>([&] { matmul(cast(a64, DType::f16), b32); }, {"matmul"});
}

TEST(Autocast, ParameterCastIsMadeOncePerGuard) {
  Tensor w = randn32({5, 5}, 6).requires_grad_();
  Tensor x = randn32({5, 5}, 7);
  Tensor first, again;
  {
    autocast::Guard g(DType::bf16);
    first = autocast::operand(w);
    again = autocast::operand(w);
    EXPECT_TRUE(first.same(again));
    EXPECT_FALSE(autocast::operand(x).same(autocast::operand(x)));  // activations: cast each time
    {
      autocast::Guard h(DType::f16);  // another dtype: its own cast
      EXPECT_EQ(autocast::operand(w).dtype(), DType::f16);
    }
  }
  autocast::Guard g(DType::bf16);
  EXPECT_FALSE(autocast::operand(w).same(first));  // a new outermost guard: a fresh cast
}

TEST(Autocast, SharedWeightGradientsAccumulateInF32) {
  // A recurrent weight used at every step: one cast, gradients of all uses summed.
  Tensor w = randn32({4, 4}, 8).requires_grad_();
  Tensor h = randn32({3, 4}, 9);
  {
    autocast::Guard g(DType::bf16);
    Tensor y = h;
    for (int t = 0; t < 3; ++t) y = tanh(matmul(y, w));
    sum(y).backward();
  }
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  // Close to the f32 gradient.
  Tensor w32 = w.detach().requires_grad_();
  Tensor y = h;
  for (int t = 0; t < 3; ++t) y = tanh(matmul(y, w32));
  sum(y).backward();
  EXPECT_TRUE(all_close(w.grad(), w32.grad(), 3e-2, 3e-2));
}

TEST(Autocast, BsmmAndBlockAttentionReturnF32) {
  LayoutPtr l = random_layout(32, 48, 16, 0.5, 3);
  Tensor x = randn32({5, 32}, 10).requires_grad_(), w = randn32({l->nnz(), 16, 16}, 11).requires_grad_();
  auto layout = AttentionLayout::dense_causal(32, 16, 2);
  Tensor q = randn32({2, 2, 32, 8}, 12), k = randn32({2, 2, 32, 8}, 13), v = randn32({2, 2, 32, 8}, 14);
  Tensor y, o;
  {
    autocast::Guard g(DType::bf16);
    y = bsmm(x, w, l);
    o = block_attention(q, k, v, layout);
    sum(y).backward();
  }
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_EQ(o.dtype(), DType::f32);
  // bf16 operands, f32 sums written as they are (no rounding of y to bf16): the f32 product of
  // the rounded operands, bit for bit
  const Tensor xr = cast(cast(x.detach(), DType::bf16), DType::f32), wr = cast(cast(w.detach(), DType::bf16), DType::f32);
  EXPECT_TRUE(all_close(y, bsmm(xr, wr, l), 0, 0));
  EXPECT_TRUE(all_close(y, bsmm(x.detach(), w.detach(), l), 2e-2, 5e-2));
  EXPECT_TRUE(all_close(o, block_attention(q, k, v, layout), 2e-2, 2e-2));
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  EXPECT_EQ(w.grad().dtype(), DType::f32);
}

// The weight and gate gradients of bsmm under autocast are the f32 sums of the bf16 products,
// never rounded to bf16 (bsmm_dw writes f32 into the gradient): a weight used at three steps, and
// once more by another op whose bf16 gradient joins the f32 sum.
TEST(Autocast, BsmmWeightGradientsAreF32SumsOfTheLowPrecisionProducts) {
  LayoutPtr l = random_layout(32, 48, 16, 0.5, 5);
  const int64_t nnz = l->nnz();
  Tensor w = randn32({nnz, 16, 16}, 21).requires_grad_();
  Tensor gate = cast(testing::test_rand({nnz}, 0.5, 1.5, 22), DType::f32).requires_grad_();
  std::vector<Tensor> xs{randn32({7, 32}, 23), randn32({7, 32}, 24), randn32({7, 32}, 25)};
  const Tensor c = cast(randn32({nnz, 16, 16}, 26), DType::bf16);  // exact in f32 as well
  {
    autocast::Guard g(DType::bf16);
    Tensor loss = cast(sum(mul(autocast::operand(w), c)), DType::f32);  // a bf16 gradient for the cast of w
    for (const Tensor& x : xs) loss = add(loss, sum(bsmm(x, w, l, gate)));
    loss.backward();
  }
  // d loss / d y = 1 (exact in bf16): P_t = x_tᵀ·1 on the blocks, in f32 from bf16-rounded x_t
  auto round16 = [](const Tensor& t) { return cast(cast(t.detach(), DType::bf16), DType::f32); };
  const Tensor ones = tessera::ones({7, 48});
  Tensor p = zeros({nnz, 16, 16});
  for (const Tensor& x : xs) p = add(p, bsmm_dw(round16(x), ones, l));
  const Tensor want_w = add(cast(c, DType::f32), mul(p, reshape(round16(gate), {nnz, 1, 1})));
  const Tensor want_gate = sum(reshape(mul(p, round16(w)), {nnz, 256}), 1);
  ASSERT_EQ(w.grad().dtype(), DType::f32);
  // 1e-5: f32 sums in another order; a bf16 rounding of any part would be ~4e-3
  EXPECT_TRUE(all_close(w.grad(), want_w, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(gate.grad(), want_gate, 1e-5, 1e-5));
}

// A compiled step whose loss function autocasts trains bitwise like the eager autocast step:
// the trace records the casts and the f32-output products, and the backward its gradients.
TEST(Autocast, CompiledStepMatchesEagerBitwise) {
  auto make = [] {
    Generator gen(3);
    std::vector<graph::NamedParam> ps = {{"w1", normal({6, 16}, 0, 0.5, gen).requires_grad_()},
                                         {"w2", normal({16, 5}, 0, 0.5, gen).requires_grad_()}};
    return ps;
  };
  auto loss_of = [](const std::vector<graph::NamedParam>& ps) {
    return [ps](const std::map<std::string, Tensor>& in) {
      autocast::Guard amp(DType::bf16);
      Tensor h = tanh(matmul(in.at("x"), ps[0].tensor));
      h = tanh(matmul(h, ps[0].tensor, false, true));  // w1 used thrice: one cached cast
      return cross_entropy(matmul(matmul(h, ps[0].tensor), ps[1].tensor), in.at("y"));
    };
  };
  std::vector<graph::NamedParam> pe = make(), pt = make();
  optim::AdamW oe(optim::param_groups_default(pe, 0.01), optim::AdamWOptions(0.01));
  optim::AdamW ot(optim::param_groups_default(pt, 0.01), optim::AdamWOptions(0.01));
  std::map<std::string, Tensor> in = {{"x", randn32({9, 6}, 5)},
                                      {"y", from_vector(std::vector<int32_t>{0, 3, 1, 4, 2, 2, 0, 1, 3}, {9})}};
  CompiledStep step = compile(loss_of(pt), pt, &ot, in);
  for (int s = 0; s < 4; ++s) {
    Tensor loss = loss_of(pe)(in);
    loss.backward();
    oe.step();
    oe.zero_grad();
    ASSERT_EQ(step.run(in), loss.item<double>()) << "step " << s;
  }
  for (size_t i = 0; i < pe.size(); ++i) EXPECT_TRUE(all_close(pt[i].tensor, pe[i].tensor, 0, 0)) << pe[i].name;
}

TEST(Autocast, F32OutputNeedsLowPrecisionInputs) {
  expect_error<DTypeError>([] { call<op::Matmul>({false, false, true}, {randn32({2, 3}, 1), randn32({3, 2}, 2)}); },
                           {"matmul", "f32 output", "bf16"});
}

}  // namespace
}  // namespace tessera
