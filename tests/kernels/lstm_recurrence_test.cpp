// lstm_recurrence / lstm_recurrence_backward on the CPU (the reference the persistent GPU kernels
// are checked against): equal to the step-by-step composition nn::LSTMCell runs (the recurrent
// matmul or bsmm, then lstm_gates) in every output and gradient, dense and block-sparse; f64
// gradient checks; the errors.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/sparse/generators.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "layers/lstm.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::expect_error;
using testing::gradcheck;
using testing::test_randn;

// A random per-gate layout [H, H] repeated for the four gates along 4H (as nn::LSTM tiles it).
LayoutPtr gate_layout(int64_t hs, int64_t bs, double density, uint64_t seed) {
  return nn::lstm_gate_layout(*random_layout(hs, hs, bs, density, seed));
}

// The same sequence as the composition of per-step ops.
std::vector<Tensor> stepwise(const Tensor& gx, const Tensor& h0, const Tensor& c0, const Tensor& wh,
                             const LayoutPtr& layout, double fb, const Tensor& bias) {
  const int64_t ts = gx.size(0);
  Tensor h = h0, c = c0;
  std::vector<Tensor> ys;
  const std::vector<Tensor> g = chunk(gx, ts, 0);
  for (int64_t t = 0; t < ts; ++t) {
    const Tensor rec = layout ? bsmm(h, wh, layout) : matmul(h, wh);
    Tensor gt = reshape(g[t], {gx.size(1), gx.size(2)});
    if (bias.defined()) gt = add(gt, bias);
    auto [hn, cn] = lstm_gates(add(gt, rec), c, fb);
    h = hn, c = cn;
    ys.push_back(reshape(h, {1, h.size(0), h.size(1)}));
  }
  return {concat(ys, 0), h, c};
}

struct Case {
  int64_t steps, batch, hidden, bs;  // bs 0: dense
  double density, forget_bias;
  bool bias;  // the op's optional bias [4H]
};

std::string label(const Case& k) {
  return "T " + std::to_string(k.steps) + " B " + std::to_string(k.batch) + " H " + std::to_string(k.hidden) +
         " bs " + std::to_string(k.bs);
}

TEST(LstmRecurrence, EqualsTheStepByStepCellInOutputsAndGradients) {
  const Case cases[] = {{5, 3, 6, 0, 1, 1.0, true},        {1, 2, 4, 0, 1, 0.0, false},
                        {4, 2, 16, 8, 0.5, 1.0, true},      {3, 1, 32, 16, 0.5, -0.5, false},
                        {6, 4, 64, 32, 0.5, 1.0, true},     {4, 2, 16, 8, 0.5, 1.0, false}};
  for (const Case& k : cases) {
    const LayoutPtr layout = k.bs ? gate_layout(k.hidden, k.bs, k.density, 11) : nullptr;
    const Shape wshape = layout ? Shape({layout->nnz(), k.bs, k.bs}) : Shape({k.hidden, 4 * k.hidden});
    const Tensor gx = test_randn({k.steps, k.batch, 4 * k.hidden}, 1), h0 = test_randn({k.batch, k.hidden}, 2),
                 c0 = test_randn({k.batch, k.hidden}, 3), wh = mul(test_randn(wshape, 4), 0.3);
    const Tensor ry = test_randn({k.steps, k.batch, k.hidden}, 5), rh = test_randn({k.batch, k.hidden}, 6),
                 rc = test_randn({k.batch, k.hidden}, 7), bias = test_randn({4 * k.hidden}, 8);
    auto run = [&](bool fused) {
      std::vector<Tensor> leaf{gx.clone().requires_grad_(), h0.clone().requires_grad_(),
                               c0.clone().requires_grad_(), wh.clone().requires_grad_()};
      if (k.bias) leaf.push_back(bias.clone().requires_grad_());
      const Tensor b = k.bias ? leaf[4] : Tensor();
      std::vector<Tensor> out;
      if (fused) {
        auto [y, h, c] = lstm_recurrence(leaf[0], leaf[1], leaf[2], leaf[3], layout, k.forget_bias, b);
        out = {y, h, c};
      } else {
        out = stepwise(leaf[0], leaf[1], leaf[2], leaf[3], layout, k.forget_bias, b);
      }
      add(add(sum(mul(out[0], ry)), sum(mul(out[1], rh))), sum(mul(out[2], rc))).backward();
      for (Tensor& l : leaf) out.push_back(l.grad());
      return out;
    };
    const std::vector<Tensor> got = run(true), want = run(false);
    const char* names[] = {"y", "hT", "cT", "dgx", "dh0", "dc0", "dwh", "dbias"};
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(got[i].defined()) << names[i] << ", " << label(k);
      EXPECT_TRUE(all_close(got[i], want[i], 1e-12, 1e-12)) << names[i] << ", " << label(k);
    }
  }
}

TEST(LstmRecurrence, GradcheckF64DenseAndSparse) {
  for (int64_t bs : {0, 8}) {
    const int64_t hs = bs ? 16 : 3;
    const LayoutPtr layout = bs ? gate_layout(hs, bs, 0.5, 3) : nullptr;
    const Shape wshape = layout ? Shape({layout->nnz(), bs, bs}) : Shape({hs, 4 * hs});
    const std::vector<Tensor> in{test_randn({3, 2, 4 * hs}, 1), test_randn({2, hs}, 2), test_randn({2, hs}, 3),
                                 mul(test_randn(wshape, 4), 0.4)};
    // every output carries a gradient ...
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& v) {
          auto [y, h, c] = lstm_recurrence(v[0], v[1], v[2], v[3], layout, 1.0);
          return concat({reshape(y, {y.numel()}), reshape(h, {h.numel()}), reshape(c, {c.numel()})});
        },
        in))
        << "bs " << bs;
    // ... or only cT (y and hT get zeros)
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& v) { return std::get<2>(lstm_recurrence(v[0], v[1], v[2], v[3], layout, -0.3)); },
        in))
        << "bs " << bs;
    // ... and with the bias input
    std::vector<Tensor> with_bias = in;
    with_bias.push_back(test_randn({4 * hs}, 5));
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& v) {
          auto [y, h, c] = lstm_recurrence(v[0], v[1], v[2], v[3], layout, 1.0, v[4]);
          return concat({reshape(y, {y.numel()}), reshape(c, {c.numel()})});
        },
        with_bias))
        << "bs " << bs << ", bias";
  }
}

TEST(LstmRecurrence, HalfTypesComputeInF32WithF32Cells) {
  const Tensor gx = test_randn({4, 3, 32}, 1), h0 = test_randn({3, 8}, 2), c0 = test_randn({3, 8}, 3);
  const Tensor wh = mul(test_randn({8, 32}, 4), 0.4);
  for (DType dt : {DType::bf16, DType::f16}) {
    auto r = [&](const Tensor& t) { return cast(t, dt); };
    auto f = [&](const Tensor& t) { return cast(cast(t, dt), DType::f32); };
    auto [y, h, c] = lstm_recurrence(r(gx), r(h0), r(c0), r(wh), nullptr, 1.0);
    EXPECT_EQ(y.dtype(), dt);
    auto [y32, h32, c32] = lstm_recurrence(f(gx), f(h0), f(c0), f(wh), nullptr, 1.0);
    // the CPU widens half types to f32 for the whole op: one rounding of each output
    EXPECT_TRUE(all_close(cast(y, DType::f32), cast(cast(y32, dt), DType::f32), 0, 0)) << dtype_name(dt);
    EXPECT_TRUE(all_close(cast(c, DType::f32), cast(cast(c32, dt), DType::f32), 0, 0)) << dtype_name(dt);
  }
}

// What the block-sparse recurrence kernels on wgmma rely on (lstm_wgmma_sparse_forward.cu): in
// nn::LSTM's gate layout, the four gates' block columns c, c + q, c + 2q, c + 3q (q = H / bs) list
// the same block rows in the same order, so one copy of h's block row feeds all four gates; and the
// blocks of a column are in increasing row order. For random and Barabási–Albert recurrent layouts.
TEST(LstmRecurrence, GateLayoutGatesShareTheirBlockRowsInOrder) {
  for (const LayoutPtr& base : {random_layout(256, 256, 32, 0.25, 3), barabasi_albert_layout(512, 512, 32, 2, 7)}) {
    const LayoutPtr l = nn::lstm_gate_layout(*base);
    const int64_t q = base->block_cols();
    ASSERT_EQ(l->block_cols(), 4 * q);
    const std::vector<int32_t>&cp = l->col_ptr(), &cb = l->col_blocks(), &br = l->block_row();
    for (int64_t c = 0; c < q; ++c) {
      const int32_t n = cp[c + 1] - cp[c];
      for (int32_t i = 1; i < n; ++i) EXPECT_LT(br[cb[cp[c] + i - 1]], br[cb[cp[c] + i]]) << "column " << c;
      for (int64_t g = 1; g < 4; ++g) {
        ASSERT_EQ(cp[g * q + c + 1] - cp[g * q + c], n) << "gate " << g << ", column " << c;
        for (int32_t i = 0; i < n; ++i)
          EXPECT_EQ(br[cb[cp[g * q + c] + i]], br[cb[cp[c] + i]])
              << "gate " << g << ", column " << c << ", entry " << i;
      }
    }
  }
}

// With the input projection's operands (x, wx, x_layout; the product run with wx detached) the
// op's backward gives wx its gradient (bsmm_dw_pair with W_h's, or bsmm_dw for one step or a dense
// W_h): every gradient equals the plain composition's, where bsmm's backward gives wx its own.
TEST(LstmRecurrence, TheInputProjectionsWeightGetsItsGradientFromTheBackward) {
  struct PairCase {
    int64_t steps, batch, in, hidden, bs;  // bs of W_h; 0: dense
    bool bias;
  };
  const PairCase cases[] = {{4, 3, 16, 16, 8, true}, {1, 2, 16, 16, 8, false}, {3, 2, 24, 16, 8, false},
                            {3, 2, 16, 16, 0, true}};
  for (const PairCase& k : cases) {
    const LayoutPtr lx = nn::lstm_gate_layout(*random_layout(k.in, k.hidden, 8, 0.5, 21));
    const LayoutPtr lh = k.bs ? gate_layout(k.hidden, k.bs, 0.5, 22) : nullptr;
    const Shape wshape = lh ? Shape({lh->nnz(), k.bs, k.bs}) : Shape({k.hidden, 4 * k.hidden});
    const Tensor x = test_randn({k.steps * k.batch, k.in}, 1), wx = mul(test_randn({lx->nnz(), 8, 8}, 2), 0.3),
                 h0 = test_randn({k.batch, k.hidden}, 3), c0 = test_randn({k.batch, k.hidden}, 4),
                 wh = mul(test_randn(wshape, 5), 0.3), bias = test_randn({4 * k.hidden}, 6),
                 ry = test_randn({k.steps, k.batch, k.hidden}, 7);
    auto run = [&](bool paired) {
      std::vector<Tensor> leaf{x.clone().requires_grad_(), wx.clone().requires_grad_(), h0.clone().requires_grad_(),
                               c0.clone().requires_grad_(), wh.clone().requires_grad_(),
                               bias.clone().requires_grad_()};
      const Tensor b = k.bias ? leaf[5] : Tensor();
      const Tensor wx_product = paired ? leaf[1].detach() : leaf[1];  // paired: wx's gradient from the recurrence
      const Tensor gx = reshape(bsmm(leaf[0], wx_product, lx), {k.steps, k.batch, 4 * k.hidden});
      auto [y, h, c] = paired ? lstm_recurrence(gx, leaf[2], leaf[3], leaf[4], lh, 1.0, b, leaf[0], leaf[1], lx)
                              : lstm_recurrence(gx, leaf[2], leaf[3], leaf[4], lh, 1.0, b);
      add(sum(mul(y, ry)), sum(c)).backward();
      std::vector<Tensor> grads;
      for (int i = 0; i < (k.bias ? 6 : 5); ++i) grads.push_back(leaf[i].grad());
      return grads;
    };
    const std::vector<Tensor> got = run(true), want = run(false);
    const char* names[] = {"dx", "dwx", "dh0", "dc0", "dwh", "dbias"};
    const std::string what =
        "T " + std::to_string(k.steps) + " In " + std::to_string(k.in) + " bs " + std::to_string(k.bs);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(got[i].defined()) << names[i] << ", " << what;
      EXPECT_TRUE(all_close(got[i], want[i], 1e-12, 1e-12)) << names[i] << ", " << what;
    }
  }
  {  // under bf16 autocast (f32 leaves): wx's gradient in f32 either way, as bsmm's backward gives it
    autocast::Guard guard(DType::bf16);
    const LayoutPtr lx = nn::lstm_gate_layout(*random_layout(16, 16, 8, 0.5, 21));
    const LayoutPtr lh = gate_layout(16, 8, 0.5, 22);
    auto wx_grad = [&](bool paired) {
      Tensor x = test_randn({6, 16}, 1, DType::f32).requires_grad_();
      Tensor wx = test_randn({lx->nnz(), 8, 8}, 2, DType::f32).requires_grad_();
      const Tensor wh = mul(test_randn({lh->nnz(), 8, 8}, 3, DType::f32), 0.3).requires_grad_();
      const Tensor h0 = test_randn({2, 16}, 4, DType::f32);
      const Tensor xo = autocast::operand(x), wo = autocast::operand(wx);
      const Tensor gx = reshape(bsmm(xo, paired ? wo.detach() : wo, lx), {3, 2, 64});
      auto [y, h, c] = paired ? lstm_recurrence(gx, h0, h0, wh, lh, 1.0, Tensor(), xo, wo, lx)
                              : lstm_recurrence(gx, h0, h0, wh, lh, 1.0);
      sum(y).backward();
      return wx.grad();
    };
    const Tensor paired = wx_grad(true), apart = wx_grad(false);
    EXPECT_EQ(paired.dtype(), DType::f32);
    EXPECT_TRUE(all_close(paired, apart, 1e-6, 1e-6));
  }
  const LayoutPtr lx = nn::lstm_gate_layout(*random_layout(16, 16, 8, 0.5, 21));
  const Tensor gx = zeros({2, 2, 64}), h = zeros({2, 16}), wh = zeros({16, 64});
  expect_error<ValueError>([&] { lstm_recurrence(gx, h, h, wh, nullptr, 0.0, Tensor(), zeros({4, 16})); },
                           {"lstm_recurrence", "x, wx and x_layout"});
  expect_error<ShapeError>(
      [&] { lstm_recurrence(gx, h, h, wh, nullptr, 0.0, Tensor(), zeros({3, 16}), zeros({lx->nnz(), 8, 8}), lx); },
      {"lstm_recurrence", "x", "[3, 16]", "[4, 16]"});
}

// f64 gradient check of the paired form: wx reaches the outputs through the product (run with wx
// detached), so its gradient is right only if the recurrence's backward (bsmm_dw_pair) gives it.
TEST(LstmRecurrence, GradcheckF64WithTheInputProjectionsWeight) {
  const LayoutPtr lx = nn::lstm_gate_layout(*random_layout(16, 16, 8, 0.5, 31));
  const LayoutPtr lh = gate_layout(16, 8, 0.5, 32);
  const std::vector<Tensor> in{test_randn({6, 16}, 1), mul(test_randn({lx->nnz(), 8, 8}, 2), 0.4),
                               test_randn({2, 16}, 3), mul(test_randn({lh->nnz(), 8, 8}, 4), 0.4)};
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<Tensor>& v) {
        const Tensor gx = reshape(bsmm(v[0], v[1].detach(), lx), {3, 2, 64});
        auto [y, h, c] = lstm_recurrence(gx, v[2], v[2], v[3], lh, 1.0, Tensor(), v[0], v[1], lx);
        return concat({reshape(y, {y.numel()}), reshape(c, {c.numel()})});
      },
      in));
}

TEST(LstmRecurrence, NotFusedOnTheCpu) {
  EXPECT_FALSE(lstm_recurrence_fused(TensorMeta{Shape({4, 2, 256}), DType::bf16, Device::cpu()}, 64, nullptr));
}

TEST(LstmRecurrence, BadArgumentsNameTheOp) {
  const Tensor gx = zeros({3, 2, 16}), h = zeros({2, 4}), wh = zeros({4, 16});
  expect_error<ShapeError>([&] { lstm_recurrence(zeros({6, 16}), h, h, wh); }, {"lstm_recurrence", "gx", "[T, 2, 16]"});
  expect_error<ShapeError>([&] { lstm_recurrence(zeros({3, 2, 12}), h, h, wh); }, {"lstm_recurrence", "gx", "[3, 2, 12]"});
  expect_error<ShapeError>([&] { lstm_recurrence(gx, h, zeros({3, 4}), wh); }, {"lstm_recurrence", "c0", "[3, 4]"});
  expect_error<ShapeError>([&] { lstm_recurrence(gx, h, h, zeros({4, 15})); }, {"lstm_recurrence", "wh", "[4, 15]"});
  expect_error<DTypeError>([&] { lstm_recurrence(gx, h, h, zeros({4, 16}, DType::f64)); },
                           {"lstm_recurrence", "wh", "dtype"});
  expect_error<ValueError>([&] { lstm_recurrence(gx, h, h, wh, nullptr, std::numeric_limits<double>::infinity()); },
                           {"lstm_recurrence", "forget_bias"});
  expect_error<ShapeError>([&] { lstm_recurrence(gx, h, h, wh, nullptr, 0.0, zeros({4})); },
                           {"lstm_recurrence", "bias", "[4]", "[16]"});
  expect_error<DTypeError>([&] { lstm_recurrence(gx, h, h, wh, nullptr, 0.0, zeros({16}, DType::f64)); },
                           {"lstm_recurrence", "bias", "dtype"});
  const LayoutPtr l = gate_layout(16, 8, 0.5, 1);
  const Tensor gx16 = zeros({3, 2, 64}), h16 = zeros({2, 16});
  expect_error<ShapeError>([&] { lstm_recurrence(gx16, h16, h16, zeros({16, 64}), l); },
                           {"lstm_recurrence", "wh", "[16, 64]", "layout"});
  expect_error<ShapeError>([&] { lstm_recurrence(gx, h, h, wh, l); }, {"lstm_recurrence", "layout"});
  // the backward op checks its saved tensors' compute type
  auto outs = call<op::LstmRecurrence>({nullptr, 0.0, nullptr}, {gx, h, h, wh});
  expect_error<DTypeError>(
      [&] { lstm_recurrence_backward(outs[0], h, h, cast(outs[3], DType::f64), outs[4], h, wh, nullptr); },
      {"lstm_recurrence_backward", "gates"});
  expect_error<ShapeError>([&] { lstm_recurrence_backward(zeros({3, 2, 5}), h, h, outs[3], outs[4], h, wh, nullptr); },
                           {"lstm_recurrence_backward", "dy", "[3, 2, 5]"});
}

}  // namespace
}  // namespace tessera
