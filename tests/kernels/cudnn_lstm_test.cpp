// cudnn_lstm / cudnn_lstm_backward on the CPU (the reference kernels the cuDNN kernels are
// checked against): equal to tessera's own step-by-step nn::LSTM in the output, the final state and
// every gradient; f64 gradient checks of the op; the op's and the layer option's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "core/autocast.h"
#include "core/graph/compile.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "layers/lstm.h"

namespace tessera {
namespace {

using nn::LSTM;
using nn::LSTMOptions;
using nn::LSTMOutput;
using testing::all_close;
using testing::expect_error;
using testing::gradcheck;
using testing::test_randn;

// Gives every parameter random values (the bias too, so its packing is exercised).
void randomize(const nn::Module& m, uint64_t seed) {
  for (const auto& p : m.named_parameters()) {
    const std::vector<double> v = mul(test_randn(p.tensor.shape(), seed++), 0.5).to_vector<double>();
    convert_elements(v.data(), DType::f64, p.tensor.data_ptr(), p.tensor.dtype(), p.tensor.numel());
  }
}

Tensor randn(const Shape& s, uint64_t seed, DType dt, double scale = 1.0) {
  return cast(mul(test_randn(s, seed), scale), dt);
}

struct Problem {
  int64_t steps, batch, in, hidden;
  double forget_bias;
};

// Runs `m` on leaf copies of x, h0, c0 and backpropagates L = Σ y·ry + Σ hT·rh + Σ cT·rc (so every
// output carries a gradient). Returns the outputs and the gradients of x, h0, c0 and the parameters.
struct Result {
  Tensor y, h, c;
  std::map<std::string, Tensor> grads;
};
Result run(LSTM& m, const Tensor& x, const Tensor& h0, const Tensor& c0, uint64_t seed) {
  m.zero_grad();
  Tensor xl = x.clone().requires_grad_(), hl = h0.clone().requires_grad_(), cl = c0.clone().requires_grad_();
  const LSTMOutput o = m.forward(xl, {hl, cl});
  const DType dt = x.dtype();
  Tensor loss = add(add(sum(mul(o.output, randn(o.output.shape(), seed, dt))),
                        sum(mul(o.state.h, randn(o.state.h.shape(), seed + 1, dt)))),
                    sum(mul(o.state.c, randn(o.state.c.shape(), seed + 2, dt))));
  loss.backward();
  Result r{o.output, o.state.h, o.state.c, {{"x", xl.grad()}, {"h0", hl.grad()}, {"c0", cl.grad()}}};
  for (const auto& p : m.named_parameters()) r.grads[p.name] = p.tensor.grad();
  return r;
}

TEST(CudnnLstm, LayerPathEqualsTesserasLstmForwardAndGradients) {
  const Problem problems[] = {{5, 3, 4, 7, 1.0}, {1, 2, 3, 2, 0.0}, {4, 1, 6, 5, -0.5}};
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-12 : 2e-5;
    for (const Problem& p : problems) {
      const std::string what = std::string(dtype_name(dt)) + " T " + std::to_string(p.steps) + " B " +
                               std::to_string(p.batch) + " In " + std::to_string(p.in) + " H " +
                               std::to_string(p.hidden);
      const LSTMOptions o = LSTMOptions(p.in, p.hidden).forget_bias(p.forget_bias).dtype(dt);
      Generator g1(3), g2(3);
      LSTM ref(o, g1), fast(LSTMOptions(o).cudnn(true), g2);
      randomize(ref, 40);
      randomize(fast, 40);
      const Tensor x = randn({p.steps, p.batch, p.in}, 50, dt), h0 = randn({p.batch, p.hidden}, 51, dt),
                   c0 = randn({p.batch, p.hidden}, 52, dt);
      const Result want = run(ref, x, h0, c0, 60), got = run(fast, x, h0, c0, 60);
      EXPECT_TRUE(all_close(got.y, want.y, tol, tol)) << "output, " << what;
      EXPECT_TRUE(all_close(got.h, want.h, tol, tol)) << "hT, " << what;
      EXPECT_TRUE(all_close(got.c, want.c, tol, tol)) << "cT, " << what;
      ASSERT_EQ(got.grads.size(), want.grads.size());
      for (const auto& [name, g] : want.grads) {
        ASSERT_TRUE(g.defined() && got.grads.at(name).defined()) << name << ", " << what;
        EXPECT_TRUE(all_close(got.grads.at(name), g, tol, tol)) << "gradient of " << name << ", " << what;
      }
    }
  }
}

TEST(CudnnLstm, LayerPathTakesFlatInputAndZeroState) {
  Generator g1(4), g2(4);
  LSTM ref(LSTMOptions(3, 4).dtype(DType::f64), g1), fast(LSTMOptions(3, 4).dtype(DType::f64).cudnn(true), g2);
  randomize(ref, 10);
  randomize(fast, 10);
  const Tensor x = test_randn({6, 3}, 11);  // [T*B, In], B = 2
  const LSTMOutput a = ref.forward(x, {}, 2), b = fast.forward(x, {}, 2);
  EXPECT_EQ(b.output.shape(), Shape({6, 4}));
  EXPECT_TRUE(all_close(b.output, a.output, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(b.state.c, a.state.c, 1e-12, 1e-12));
  EXPECT_TRUE(b.steps.empty());
}

TEST(CudnnLstm, GradcheckF64) {
  // Every output carries a gradient (y, hT, cT flattened into one vector) ...
  const std::vector<Tensor> in{test_randn({3, 2, 3}, 1), test_randn({2, 4}, 2),
                               test_randn({2, 4}, 3),    mul(test_randn({3, 16}, 4), 0.5),
                               mul(test_randn({4, 16}, 5), 0.5), mul(test_randn({16}, 6), 0.5)};
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& v) {
        auto [y, h, c] = cudnn_lstm(v[0], v[1], v[2], v[3], v[4], v[5], 1.0);
        return concat({reshape(y, {24}), reshape(h, {8}), reshape(c, {8})});
      },
      in));
  // ... or only y (hT and cT get no gradient: zeros), or only cT.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& v) { return std::get<0>(cudnn_lstm(v[0], v[1], v[2], v[3], v[4], v[5], -0.3)); },
      in));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& v) { return std::get<2>(cudnn_lstm(v[0], v[1], v[2], v[3], v[4], v[5], 0.0)); },
      in));
}

TEST(CudnnLstm, HalfTypesComputeInF32) {
  const Tensor x = test_randn({4, 3, 5}, 1), h0 = test_randn({3, 6}, 2), c0 = test_randn({3, 6}, 3);
  const Tensor wx = mul(test_randn({5, 24}, 4), 0.4), wh = mul(test_randn({6, 24}, 5), 0.4), b = test_randn({24}, 6);
  for (DType dt : {DType::bf16, DType::f16}) {
    auto r = [&](const Tensor& t) { return cast(t, dt); };
    auto f = [&](const Tensor& t) { return cast(cast(t, dt), DType::f32); };  // the same values in f32
    auto [y, h, c] = cudnn_lstm(r(x), r(h0), r(c0), r(wx), r(wh), r(b), 1.0);
    auto [y32, h32, c32] = cudnn_lstm(f(x), f(h0), f(c0), f(wx), f(wh), f(b), 1.0);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_TRUE(all_close(y, cast(cast(y32, dt), DType::f32), 0, 0)) << dtype_name(dt);  // rounded once
    EXPECT_TRUE(all_close(c, cast(cast(c32, dt), DType::f32), 0, 0)) << dtype_name(dt);
  }
}

// Under autocast the f32 inputs run as bf16/f16 (what explicit casts give, bit for bit) and the
// outputs come back in f32.
TEST(CudnnLstm, AutocastRunsTheHalfTypePath) {
  const Tensor x = test_randn({4, 3, 5}, 1, DType::f32), h0 = test_randn({3, 6}, 2, DType::f32),
               c0 = test_randn({3, 6}, 3, DType::f32);
  const Tensor wx = mul(test_randn({5, 24}, 4, DType::f32), 0.4), wh = mul(test_randn({6, 24}, 5, DType::f32), 0.4),
               b = test_randn({24}, 6, DType::f32);
  for (DType dt : {DType::bf16, DType::f16}) {
    auto r = [&](const Tensor& t) { return cast(t, dt); };
    auto [y16, h16, c16] = cudnn_lstm(r(x), r(h0), r(c0), r(wx), r(wh), r(b), 1.0);
    autocast::Guard guard(dt);
    auto [y, h, c] = cudnn_lstm(x, h0, c0, wx, wh, b, 1.0);
    EXPECT_EQ(y.dtype(), DType::f32);
    EXPECT_EQ(c.dtype(), DType::f32);
    EXPECT_TRUE(all_close(y, cast(y16, DType::f32), 0, 0)) << dtype_name(dt);
    EXPECT_TRUE(all_close(h, cast(h16, DType::f32), 0, 0)) << dtype_name(dt);
    EXPECT_TRUE(all_close(c, cast(c16, DType::f32), 0, 0)) << dtype_name(dt);
  }
}

TEST(CudnnLstm, LayerCompilesLikeEager) {
  Generator gen(8);
  LSTM lstm(LSTMOptions(4, 3).cudnn(true), gen);
  randomize(lstm, 30);
  const Tensor x = test_randn({5, 2, 4}, 31, DType::f32);
  auto loss_fn = [&](const std::map<std::string, Tensor>& in) {
    const LSTMOutput o = lstm.forward(in.at("x"));
    return add(mean(o.output), mean(o.state.c));
  };
  lstm.zero_grad();
  Tensor eager = loss_fn({{"x", x}});
  eager.backward();
  CompiledStep step = compile(loss_fn, lstm.named_parameters(), nullptr, {{"x", x}});
  EXPECT_EQ(step.run({{"x", x}}), eager.item<double>());
  for (const auto& p : lstm.named_parameters())
    EXPECT_TRUE(all_close(step.fetch("grad/" + p.name), p.tensor.grad(), 0, 0)) << p.name;
}

TEST(CudnnLstm, BadArgumentsNameTheOp) {
  const Tensor x = zeros({3, 2, 5}), h = zeros({2, 4}), wx = zeros({5, 16}), wh = zeros({4, 16}), b = zeros({16});
  expect_error<ShapeError>([&] { cudnn_lstm(zeros({6, 5}), h, h, wx, wh, b); }, {"cudnn_lstm", "[T, B, In]", "[6, 5]"});
  expect_error<ShapeError>([&] { cudnn_lstm(x, h, zeros({3, 4}), wx, wh, b); }, {"cudnn_lstm", "c0", "[3, 4]"});
  expect_error<ShapeError>([&] { cudnn_lstm(x, h, h, zeros({5, 15}), wh, b); },
                           {"cudnn_lstm", "wx", "[5, 15]", "[5, 16]"});
  expect_error<ShapeError>([&] { cudnn_lstm(x, h, h, wx, wh, zeros({12})); }, {"cudnn_lstm", "bias", "[16]"});
  expect_error<ShapeError>([&] { cudnn_lstm(zeros({0, 2, 5}), h, h, wx, wh, b); }, {"cudnn_lstm", ">= 1"});
  expect_error<DTypeError>([&] { cudnn_lstm(x, h, h, wx, zeros({4, 16}, DType::f64), b); },
                           {"cudnn_lstm", "wh", "f64", "dtype"});
  expect_error<DTypeError>([&] { cudnn_lstm(zeros({3, 2, 5}, DType::i32), h, h, wx, wh, b); },
                           {"cudnn_lstm", "floating"});
  expect_error<ValueError>([&] { cudnn_lstm(x, h, h, wx, wh, b, std::numeric_limits<double>::quiet_NaN()); },
                           {"cudnn_lstm", "forget_bias"});
  // The backward op checks what it is given against the forward's shapes.
  auto [y, hT, cT] = cudnn_lstm(x, h, h, wx, wh, b);
  expect_error<ShapeError>([&] { cudnn_lstm_backward(x, h, h, wx, wh, b, y, zeros({7}, DType::u8), y, hT, cT); },
                           {"cudnn_lstm_backward", "reserve", "u8[7]"});
  expect_error<ShapeError>(
      [&] { cudnn_lstm_backward(x, h, h, wx, wh, b, y, zeros({7}, DType::u8), zeros({3, 2, 5}), hT, cT); },
      {"cudnn_lstm_backward", "dy", "[3, 2, 5]"});
}

TEST(CudnnLstm, LayerOptionConflictsAreValueErrors) {
  expect_error<ValueError>([] { LSTM l(LSTMOptions(8, 16).cudnn(true).block_size(8)); }, {"cudnn", "block_size"});
  expect_error<ValueError>([] { LSTM l(LSTMOptions(8, 16).cudnn(true).layer_norm(true)); }, {"cudnn", "layer_norm"});
  expect_error<ValueError>([] { LSTM l(LSTMOptions(8, 16).cudnn(true).multiplicative(true)); },
                           {"cudnn", "multiplicative"});
  expect_error<ValueError>([] { LSTM l(LSTMOptions(8, 16).cudnn(true).recompute_chunk(4)); },
                           {"cudnn", "recompute_chunk"});
}

}  // namespace
}  // namespace tessera
