#include "layers/lstm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/autograd.h"
#include "core/graph/compile.h"
#include "core/sparse/generators.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using nn::LSTM;
using nn::LSTMOptions;
using nn::LSTMState;
using testing::all_close;
using testing::dense_from_blocks;
using testing::expect_error;
using testing::gradcheck;
using testing::parameters_gradcheck;
using testing::set_values;
using testing::test_randn;

// The parameter called `name` ("wx.weight", "bias", ...).
Tensor param(const nn::Module& m, const std::string& name) {
  for (const auto& p : m.named_parameters())
    if (p.name == name) return p.tensor;
  ADD_FAILURE() << "no parameter " << name;
  return Tensor();
}


// Gives every parameter random values (biases and gains included, so none is trivially 0 or 1).
void randomize(const nn::Module& m, uint64_t seed) {
  for (const auto& p : m.named_parameters())
    set_values(p.tensor, mul(test_randn(p.tensor.shape(), seed++), 0.5));
}

// Dense W [in, out] of a layer: the weight itself, or the blocks of a block-sparse one placed on
// its layout (zeros elsewhere), as an f64 tensor.
Tensor dense_weight(const nn::Module& cell, const std::string& name) {
  for (const auto& [n, child] : cell.named_children()) {
    if (n != name) continue;
    if (auto sp = std::dynamic_pointer_cast<nn::BlockSparseLinear>(child)) {
      const BlockLayout& l = *sp->layout();
      return from_vector(dense_from_blocks(sp->weight(), l), {l.in_features(), l.out_features()}, DType::f64);
    }
    return param(cell, name + ".weight");
  }
  ADD_FAILURE() << "no submodule " << name;
  return Tensor();
}

// The LSTM written with basic ops (matmul, split, sigmoid, tanh, layer_norm), one step at a time.
LSTMState reference(const LSTM& lstm, const std::vector<Tensor>& xs, LSTMState s, std::vector<Tensor>& hs) {
  const LSTMOptions& o = lstm.options();
  const int64_t H = o.hidden_size();
  const Tensor wx = dense_weight(lstm, "wx"), wh = dense_weight(lstm, "wh"), b = param(lstm, "bias");
  for (const Tensor& x : xs) {
    Tensor r = s.h;
    if (o.multiplicative())
      r = mul(matmul(x, dense_weight(lstm, "wmx")), matmul(s.h, dense_weight(lstm, "wmh")));
    Tensor px = matmul(x, wx), ph = matmul(r, wh);
    if (o.layer_norm()) {
      px = layer_norm(px, param(lstm, "gamma_x"));
      ph = layer_norm(ph, param(lstm, "gamma_h"));
    }
    std::vector<Tensor> g = split(add(add(px, ph), b), {H, H, H, H}, 1);
    Tensor i = sigmoid(g[0]), f = sigmoid(add(g[1], o.forget_bias())), out = sigmoid(g[2]), u = tanh(g[3]);
    s.c = add(mul(f, s.c), mul(i, u));
    s.h = mul(out, tanh(s.c));
    hs.push_back(s.h);
  }
  return s;
}

LSTMOptions opts(int64_t in, int64_t h) { return LSTMOptions(in, h).dtype(DType::f64).forget_bias(0.7); }

TEST(LSTM, MatchesBasicOpsReference) {
  const int64_t T = 3, B = 2;
  std::vector<LSTMOptions> cases = {opts(5, 3), opts(5, 3).multiplicative(true).layer_norm(true),
                                    opts(16, 16).block_size(8).density(0.5, 3).multiplicative(true),
                                    opts(8, 16).block_size(8).density(0.5, 4).layer_norm(true)};
  for (size_t n = 0; n < cases.size(); ++n) {
    Generator gen(n);
    LSTM lstm(cases[n], gen);
    randomize(lstm, 10 * n + 1);
    const int64_t in = cases[n].input_size(), H = cases[n].hidden_size();
    Tensor x = test_randn({T, B, in}, 7);
    LSTMState s0{test_randn({B, H}, 8), test_randn({B, H}, 9)};
    nn::LSTMOutput out = lstm.forward(x, s0);
    std::vector<Tensor> ref_h;
    LSTMState ref = reference(lstm, chunk(reshape(x, {T * B, in}), T, 0), s0, ref_h);
    EXPECT_EQ(out.output.shape(), Shape({T * B, H}));
    ASSERT_EQ(out.steps.size(), 3u);
    EXPECT_TRUE(all_close(out.output, concat(ref_h, 0), 1e-12, 1e-12)) << "case " << n;
    EXPECT_TRUE(all_close(out.steps[1], ref_h[1], 1e-12, 1e-12)) << "case " << n;
    EXPECT_TRUE(all_close(out.state.c, ref.c, 1e-12, 1e-12)) << "case " << n;
    // The cell alone is one step of the same thing; [T*B, In] with a state is the same as [T, B, In].
    LSTMState one = lstm.LSTMCell::forward(reshape(x, {T * B, in}), LSTMState{});
    EXPECT_EQ(one.h.shape(), Shape({T * B, H}));
    EXPECT_TRUE(all_close(lstm.forward(reshape(x, {T * B, in}), s0).output, out.output, 0, 0));
  }
}

TEST(LSTM, GradcheckDenseSparseAndMultiplicativeLayerNorm) {
  std::vector<LSTMOptions> cases = {opts(3, 2), opts(16, 8).block_size(8).density(0.5, 5),
                                    opts(3, 4).multiplicative(true).layer_norm(true)};
  for (size_t n = 0; n < cases.size(); ++n) {
    Generator gen(n + 20);
    LSTM lstm(cases[n], gen);
    randomize(lstm, 30 * n + 3);
    const int64_t T = 3, B = 2, in = cases[n].input_size(), H = cases[n].hidden_size();
    // Inputs and initial state.
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& v) {
          nn::LSTMOutput o = lstm.forward(v[0], {v[1], v[2]});
          return concat({o.output, o.state.c}, 0);
        },
        {test_randn({T, B, in}, 41), test_randn({B, H}, 42), test_randn({B, H}, 43)}))
        << "case " << n;
    // Parameters.
    const Tensor x = test_randn({T, B, in}, 44);
    EXPECT_TRUE(parameters_gradcheck(
        lstm.named_parameters(),
        [&] {
          nn::LSTMOutput o = lstm.forward(x);
          return concat({o.output, o.state.c}, 0);
        },
        {}, 99))
        << "case " << n;
  }
}

TEST(LSTM, StateCarryEqualsOneRun) {
  Generator gen(3);
  LSTM lstm(opts(6, 8).multiplicative(true), gen);
  randomize(lstm, 5);
  const int64_t T = 6, B = 3;
  Tensor x = test_randn({T, B, 6}, 50);
  nn::LSTMOutput full = lstm.forward(x);
  std::vector<Tensor> halves = chunk(x, 2, 0);
  nn::LSTMOutput a = lstm.forward(halves[0]);
  nn::LSTMOutput b = lstm.forward(halves[1], a.state.detach());
  EXPECT_TRUE(all_close(concat({a.output, b.output}, 0), full.output, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(b.state.c, full.state.c, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(b.state.h, full.state.h, 1e-12, 1e-12));
}

TEST(LSTM, DetachCutsTheGraph) {
  Generator gen(4);
  LSTM lstm(opts(4, 3), gen);
  Tensor x1 = test_randn({2, 2, 4}, 60).requires_grad_(), x2 = test_randn({2, 2, 4}, 61).requires_grad_();
  nn::LSTMOutput a = lstm.forward(x1);
  EXPECT_TRUE(a.state.h.requires_grad());
  LSTMState carried = a.state.detach();
  EXPECT_FALSE(carried.h.requires_grad());
  EXPECT_TRUE(carried.c.is_leaf());
  EXPECT_TRUE(all_close(carried.c, a.state.c, 0, 0));
  EXPECT_FALSE(LSTMState{}.detach().defined());
  sum(lstm.forward(x2, carried).output).backward();
  EXPECT_TRUE(x2.grad().defined());
  EXPECT_FALSE(x1.grad().defined());  // nothing flowed back into the first batch
  EXPECT_TRUE(param(lstm, "wh.weight").grad().defined());
}

TEST(LSTM, ParametersAndLayouts) {
  Generator gen(5);
  LSTM dense(LSTMOptions(5, 3).multiplicative(true).layer_norm(true), gen);
  std::vector<std::string> names;
  for (const auto& p : dense.named_parameters()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"bias", "gamma_x", "gamma_h", "wx.weight", "wh.weight",
                                             "wmx.weight", "wmh.weight"}));
  EXPECT_EQ(dense.num_parameters(), 5 * 12 + 3 * 12 + 5 * 3 + 3 * 3 + 3 * 12);
  EXPECT_FLOAT_EQ(param(dense, "bias").to_vector<double>()[0], 0.0);

  LayoutPtr rec = barabasi_albert_layout(32, 32, 8, 1, 7);
  LSTM sparse(LSTMOptions(16, 32).block_size(8).density(0.5, 2).recurrent_layout(rec), gen);
  EXPECT_EQ(sparse.recurrent_layout(), rec);
  ASSERT_TRUE(sparse.input_layout());
  const int64_t nx = sparse.input_layout()->nnz(), nh = rec->nnz();
  EXPECT_EQ(nx, 4);  // round(0.5 * 2 * 4) blocks per gate
  EXPECT_EQ(param(sparse, "wx.weight").shape(), Shape({4 * nx, 8, 8}));
  EXPECT_EQ(sparse.num_parameters(), 4 * (nx + nh) * 64 + 4 * 32);
  EXPECT_EQ(sparse.forward(test_randn({3, 2, 16}, 1, DType::f32)).output.shape(), Shape({6, 32}));
}

TEST(LSTM, Errors) {
  expect_error<ValueError>([] { LSTM l(LSTMOptions(8, 8).block_size(12)); }, {"LSTM", "block_size", "12"});
  expect_error<ValueError>([] { LSTM l(LSTMOptions(8, 8).density(0.5)); }, {"LSTM", "density", "block_size"});
  expect_error<ShapeError>([] { LSTM l(LSTMOptions(12, 8).block_size(8)); }, {"LSTM", "input_size 12", "8"});
  expect_error<ShapeError>(
      [] { LSTM l(LSTMOptions(8, 16).block_size(8).recurrent_layout(dense_layout(8, 8, 8))); },
      {"LSTM", "recurrent layout", "[16, 16]"});
  LSTM lstm(LSTMOptions(4, 3));
  expect_error<ShapeError>([&] { lstm.forward(zeros({2, 2, 5})); }, {"LSTM", "[2, 2, 5]", "4"});
  expect_error<ValueError>([&] { lstm.forward(zeros({6, 4})); }, {"LSTM", "[6, 4]", "batch"});
  expect_error<ShapeError>([&] { lstm.forward(zeros({7, 4}), {}, 2); }, {"LSTM", "[7, 4]", "batch 2"});
  expect_error<ShapeError>(
      [&] {
        lstm.forward(zeros({2, 2, 4}), {zeros({2, 3}), zeros({3, 3})});
      },
      {"LSTM", "state", "[3, 3]", "[2, 3]"});
}

TEST(LSTM, RecomputeChunksCompileLikeEager) {
  for (int64_t rc : {0, 2}) {
    Generator gen(6);
    LSTM lstm(opts(4, 3).recompute_chunk(rc), gen);
    randomize(lstm, 70);
    Tensor x = test_randn({5, 2, 4}, 71);
    auto loss_fn = [&](const std::map<std::string, Tensor>& in) {
      return mean(lstm.forward(in.at("x")).output);
    };
    lstm.zero_grad();
    Tensor eager = loss_fn({{"x", x}});
    eager.backward();
    CompiledStep step = compile(loss_fn, lstm.named_parameters(), nullptr, {{"x", x}});
    EXPECT_EQ(step.run({{"x", x}}), eager.item<double>()) << "recompute_chunk " << rc;
    for (const auto& p : lstm.named_parameters())
      EXPECT_TRUE(all_close(step.fetch("grad/" + p.name), p.tensor.grad(), 0, 0)) << p.name << ", rc " << rc;
    int recomputed = 0;
    for (const auto& n : step.executor().graph().nodes) recomputed += n.phase == graph::NodePhase::recompute;
    EXPECT_EQ(recomputed > 0, rc > 0) << "recompute_chunk " << rc;
  }
}

}  // namespace
}  // namespace tessera
