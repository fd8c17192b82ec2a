// nn::Module (parameter paths, registration checks, train/eval, zero_grad, counts) and the basic
// layers: Linear, Embedding, LayerNorm, Dropout, SparseLayerNorm (shapes, values against the
// underlying ops, initialization, errors, gradients reaching parameters).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "kernels/ops.h"
#include "layers/layers.h"

namespace tessera {
namespace {

using Kind = nn::AttentionLayoutKind;

using testing::all_close;
using testing::expect_error;
using testing::gradcheck;
using testing::test_randn;

// A container that exposes registration, for building nested test models.
struct Bag : nn::Module {
  template <class M>
  std::shared_ptr<M> add(const std::string& name, std::shared_ptr<M> m) { return register_module(name, m); }
  Tensor param(const std::string& name, Tensor t) { return register_parameter(name, t); }
};

struct Block : nn::Module {
  Block(int64_t c, Generator& gen, DType t = DType::f32) {
    fc = register_module("fc", std::make_shared<nn::Linear>(nn::LinearOptions(c, c).dtype(t), gen));
    ln = register_module("ln", std::make_shared<nn::LayerNorm>(nn::LayerNormOptions(c).dtype(t)));
  }
  Tensor forward(const Tensor& x) const { return ln->forward(fc->forward(x)); }
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<nn::LayerNorm> ln;
};

struct Net : nn::Module {
  explicit Net(Generator& gen) {
    emb = register_module("emb", std::make_shared<nn::Embedding>(nn::EmbeddingOptions(10, 4), gen));
    blocks = register_module("blocks", std::make_shared<Bag>());
    for (int i = 0; i < 2; ++i) blocks->add(std::to_string(i), std::make_shared<Block>(4, gen));
    drop = register_module("drop", std::make_shared<nn::Dropout>(nn::DropoutOptions(0.1)));
    head = register_module("head", std::make_shared<nn::Linear>(nn::LinearOptions(4, 3).bias(false), gen));
  }
  std::shared_ptr<nn::Embedding> emb;
  std::shared_ptr<Bag> blocks;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::Linear> head;
};

TEST(Module, NamedParameterPaths) {
  Generator gen(1);
  Net net(gen);
  std::vector<std::string> names;
  for (const nn::NamedParam& p : net.named_parameters()) names.push_back(p.name);
  const std::vector<std::string> expected{
      "emb.weight",       "blocks.0.fc.weight", "blocks.0.fc.bias", "blocks.0.ln.gamma", "blocks.0.ln.beta",
      "blocks.1.fc.weight", "blocks.1.fc.bias", "blocks.1.ln.gamma", "blocks.1.ln.beta", "head.weight"};
  EXPECT_EQ(names, expected);
  // parameters() is the same tensors in the same order; all require grad.
  std::vector<Tensor> ps = net.parameters();
  ASSERT_EQ(ps.size(), expected.size());
  EXPECT_TRUE(ps[1].same(net.blocks->named_parameters()[0].tensor));
  for (const Tensor& p : ps) EXPECT_TRUE(p.requires_grad());
  EXPECT_EQ(net.named_children().size(), 4u);
  EXPECT_EQ(net.named_children()[1].first, "blocks");
  // 10·4 + 2·(4·4 + 4 + 4 + 4) + 4·3
  EXPECT_EQ(net.num_parameters(), 40 + 2 * 28 + 12);
  EXPECT_EQ(nn::Linear(nn::LinearOptions(3, 4)).num_parameters(), 16);
  EXPECT_EQ(nn::Linear(nn::LinearOptions(3, 4).bias(false)).num_parameters(), 12);
  EXPECT_EQ(nn::Dropout().num_parameters(), 0);
}

TEST(Module, RegistrationErrors) {
  Bag bag;
  bag.param("w", zeros({2}));
  expect_error<ValueError>([&] { bag.param("w", zeros({2})); }, {"'w'", "already registered"});
  expect_error<ValueError>([&] { bag.add("w", std::make_shared<Bag>()); }, {"'w'", "already registered"});
  bag.add("sub", std::make_shared<Bag>());
  expect_error<ValueError>([&] { bag.param("sub", zeros({2})); }, {"'sub'"});
  expect_error<ValueError>([&] { bag.add("sub", std::make_shared<Bag>()); }, {"'sub'"});
  expect_error<ValueError>([&] { bag.param("a.b", zeros({2})); }, {"'a.b'"});
  expect_error<ValueError>([&] { bag.param("", zeros({2})); }, {"module"});
  expect_error<ValueError>([&] { bag.param("i", zeros({2}, DType::i32)); }, {"'i'", "floating"});
  expect_error<ValueError>([&] { bag.add("null", std::shared_ptr<Bag>()); }, {"'null'"});
  Tensor leaf = zeros({2}).requires_grad_();
  expect_error<ValueError>([&] { bag.param("nonleaf", add(leaf, leaf)); }, {"'nonleaf'", "leaf"});
}

TEST(Module, TrainEvalPropagates) {
  Generator gen(2);
  Net net(gen);
  EXPECT_TRUE(net.is_training());
  net.eval();
  EXPECT_FALSE(net.is_training());
  EXPECT_FALSE(net.blocks->is_training());
  for (const auto& c : net.blocks->named_children()) {
    EXPECT_FALSE(c.second->is_training());
    for (const auto& cc : c.second->named_children()) EXPECT_FALSE(cc.second->is_training());
  }
  // A module added to an eval-mode parent takes the parent's mode.
  auto late = net.blocks->add("2", std::make_shared<Block>(4, gen));
  EXPECT_FALSE(late->fc->is_training());
  net.train();
  EXPECT_TRUE(late->ln->is_training());
  EXPECT_TRUE(net.drop->is_training());
}

TEST(Module, ZeroGrad) {
  Generator gen(3);
  Block block(5, gen, DType::f64);
  block.forward(test_randn({3, 5}, 4)).backward(test_randn({3, 5}, 5));
  for (const nn::NamedParam& p : block.named_parameters()) EXPECT_TRUE(p.tensor.grad().defined()) << p.name;
  block.zero_grad();
  for (const nn::NamedParam& p : block.named_parameters()) EXPECT_FALSE(p.tensor.grad().defined()) << p.name;
}

TEST(Linear, ShapesValuesInit) {
  Generator gen(7);
  nn::Linear fc(nn::LinearOptions(3, 5).dtype(DType::f64), gen);
  EXPECT_EQ(fc.weight().shape(), Shape({3, 5}));  // input-major
  EXPECT_EQ(fc.bias().shape(), Shape({5}));
  Tensor x = test_randn({7, 3}, 8);
  EXPECT_TRUE(all_close(fc.forward(x), add(matmul(x, fc.weight()), fc.bias()), 1e-15, 0));
  // Any leading dims: [2, 7, 3] -> [2, 7, 5]; [3] -> [5].
  Tensor x3 = test_randn({2, 7, 3}, 9);
  Tensor y3 = fc.forward(x3);
  EXPECT_EQ(y3.shape(), Shape({2, 7, 5}));
  EXPECT_TRUE(all_close(reshape(y3, {14, 5}), fc.forward(reshape(x3, {14, 3})), 1e-15, 0));
  EXPECT_EQ(fc.forward(test_randn({3}, 10)).shape(), Shape({5}));
  nn::Linear nob(nn::LinearOptions(3, 5).bias(false), gen);
  EXPECT_FALSE(nob.bias().defined());
  Tensor xf = test_randn({4, 3}, 11, DType::f32);
  EXPECT_EQ(nob.forward(xf).to_vector<float>(), matmul(xf, nob.weight()).to_vector<float>());
  // uniform(-1/sqrt(in), 1/sqrt(in)), deterministic from the generator's state.
  nn::Linear big(nn::LinearOptions(64, 128), gen);
  const double bound = 1.0 / 8.0;
  double lo = 1, hi = -1;
  for (double w : big.weight().to_vector<double>()) lo = std::min(lo, w), hi = std::max(hi, w);
  EXPECT_GE(lo, -bound);
  EXPECT_LT(hi, bound);
  EXPECT_LT(lo, -0.9 * bound);
  EXPECT_GT(hi, 0.9 * bound);
  Generator g1(5), g2(5);
  EXPECT_EQ(nn::Linear(nn::LinearOptions(4, 3), g1).weight().to_vector<float>(),
            nn::Linear(nn::LinearOptions(4, 3), g2).weight().to_vector<float>());
  expect_error<ShapeError>([&] { fc.forward(test_randn({7, 4})); }, {"Linear", "f64[7, 4]", "f64[3, 5]"});
  expect_error<ValueError>([&] { nn::Linear(nn::LinearOptions(0, 3)); }, {"Linear", "in_features"});
}

TEST(Embedding, ShapesValuesInit) {
  Generator gen(12);
  nn::Embedding emb(nn::EmbeddingOptions(6, 3), gen);
  EXPECT_EQ(emb.weight().shape(), Shape({6, 3}));
  Tensor ids = from_vector(std::vector<int32_t>{5, 0, 2, 2, 1, 5}, {2, 3});
  Tensor e = emb.forward(ids);
  EXPECT_EQ(e.shape(), Shape({2, 3, 3}));
  const std::vector<float> w = emb.weight().to_vector<float>(), ev = e.to_vector<float>();
  const int32_t idv[] = {5, 0, 2, 2, 1, 5};
  for (int n = 0; n < 6; ++n)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(ev[n * 3 + j], w[idv[n] * 3 + j]);
  EXPECT_EQ(e.to_vector<float>(), embedding(emb.weight(), ids).to_vector<float>());
  // normal(0, std): the sample std of a large table is close to std.
  nn::Embedding big(nn::EmbeddingOptions(1000, 64).std(0.5), gen);
  double s2 = 0;
  for (double v : big.weight().to_vector<double>()) s2 += v * v;
  EXPECT_NEAR(std::sqrt(s2 / 64000), 0.5, 0.01);
  expect_error<ValueError>([&] { emb.forward(from_vector(std::vector<int32_t>{6}, {1})); }, {"6"});
}

TEST(LayerNormLayer, ValuesAndOptions) {
  nn::LayerNorm ln(nn::LayerNormOptions(6).eps(1e-3).dtype(DType::f64));
  EXPECT_EQ(ln.gamma().to_vector<double>(), std::vector<double>(6, 1.0));
  EXPECT_EQ(ln.beta().to_vector<double>(), std::vector<double>(6, 0.0));
  Tensor x = test_randn({5, 6}, 13);
  EXPECT_EQ(ln.forward(x).to_vector<double>(), layer_norm(x, ln.gamma(), ln.beta(), 1e-3).to_vector<double>());
  nn::LayerNorm plain(nn::LayerNormOptions(6).affine(false).dtype(DType::f64));
  EXPECT_EQ(plain.num_parameters(), 0);
  EXPECT_FALSE(plain.gamma().defined());
  EXPECT_EQ(plain.forward(x).to_vector<double>(), layer_norm(x).to_vector<double>());
  expect_error<ShapeError>([&] { plain.forward(test_randn({5, 4})); }, {"LayerNorm", "[5, 4]", "6"});
}

TEST(DropoutLayer, TrainAndEval) {
  nn::Dropout drop(nn::DropoutOptions(0.25));
  Tensor x = test_randn({40, 50}, 14, DType::f32);
  Generator a(9), b(9);
  Tensor y = drop.forward(x, a);
  EXPECT_EQ(y.to_vector<float>(), dropout(x, 0.25, b).to_vector<float>());
  EXPECT_EQ(a.state(), b.state());
  int zeros_n = 0;
  for (float v : y.to_vector<float>()) zeros_n += v == 0.0f;
  EXPECT_NEAR(zeros_n / 2000.0, 0.25, 0.05);
  drop.eval();
  Generator c(9);
  Tensor e = drop.forward(x, c);
  EXPECT_TRUE(e.same(x));                  // eval: the identity, x itself
  EXPECT_EQ(c.state(), Generator(9).state());  // and no random numbers drawn
  expect_error<ValueError>([] { nn::Dropout(nn::DropoutOptions(1.0)); }, {"Dropout", "p"});
}

TEST(SparseLayerNormLayer, ValuesAndOptions) {
  nn::SparseLayerNorm ln(nn::SparseLayerNormOptions(12, 4).relu(true).dtype(DType::f64));
  EXPECT_EQ(ln.gamma().shape(), Shape({12}));
  Tensor x = test_randn({3, 12}, 15);
  EXPECT_EQ(ln.forward(x).to_vector<double>(),
            sparse_layer_norm(x, 4, ln.gamma(), ln.beta(), 1e-5, true).to_vector<double>());
  nn::SparseLayerNorm plain(nn::SparseLayerNormOptions(12, 3).affine(false).eps(1e-3).dtype(DType::f64));
  EXPECT_EQ(plain.num_parameters(), 0);
  EXPECT_EQ(plain.forward(x).to_vector<double>(),
            sparse_layer_norm(x, 3, Tensor(), Tensor(), 1e-3).to_vector<double>());
  expect_error<ShapeError>([] { nn::SparseLayerNorm(nn::SparseLayerNormOptions(10, 4)); },
                           {"SparseLayerNorm", "10", "4"});
  expect_error<ValueError>([] { nn::SparseLayerNorm(nn::SparseLayerNormOptions(10, 0)); }, {"SparseLayerNorm"});
  expect_error<ShapeError>([&] { ln.forward(test_randn({3, 8})); }, {"SparseLayerNorm", "[3, 8]", "12"});
}

// A small f64 stack: Linear -> LayerNorm -> SparseLayerNorm(relu) -> Linear.
struct Stack : nn::Module {
  explicit Stack(Generator& gen) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(nn::LinearOptions(5, 6).dtype(DType::f64), gen));
    ln = register_module("ln", std::make_shared<nn::LayerNorm>(nn::LayerNormOptions(6).dtype(DType::f64)));
    sln = register_module("sln", std::make_shared<nn::SparseLayerNorm>(
                                     nn::SparseLayerNormOptions(6, 2).relu(true).dtype(DType::f64)));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(nn::LinearOptions(6, 3).dtype(DType::f64), gen));
  }
  Tensor forward(const Tensor& x) const { return fc2->forward(sln->forward(ln->forward(fc1->forward(x)))); }
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::LayerNorm> ln;
  std::shared_ptr<nn::SparseLayerNorm> sln;
};

TEST(Layers, GradientsReachParameters) {
  Generator gen(21);
  Stack net(gen);
  {  // non-trivial affine parameters (not the ones/zeros init), in place on the leaves
    NoGradGuard ng;
    for (const Tensor& p : {net.ln->gamma(), net.ln->beta(), net.sln->gamma(), net.sln->beta()}) {
      double* d = p.data<double>();
      std::vector<double> r = test_randn(p.shape(), 22 + p.numel()).to_vector<double>();
      for (int64_t i = 0; i < p.numel(); ++i) d[i] = 0.2 + 0.3 * r[i];
    }
  }
  Tensor x = test_randn({4, 5}, 23), w = test_randn({4, 3}, 24);
  // Through the input, with the standard checker (parameters fixed; their .grad is dropped after).
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& v) { return net.forward(v[0]); }, {x}));
  net.zero_grad();
  auto loss = [&] { return sum(mul(net.forward(x), w)); };
  loss().backward();
  // Central differences on every parameter element, against the accumulated .grad.
  NoGradGuard ng;
  for (const nn::NamedParam& p : net.named_parameters()) {
    ASSERT_TRUE(p.tensor.grad().defined()) << p.name;
    const std::vector<double> g = p.tensor.grad().to_vector<double>();
    double* d = p.tensor.data<double>();
    for (int64_t i = 0; i < p.tensor.numel(); ++i) {
      const double orig = d[i], h = 1e-6;
      d[i] = orig + h;
      const double lp = loss().item<double>();
      d[i] = orig - h;
      const double lm = loss().item<double>();
      d[i] = orig;
      EXPECT_NEAR(g[i], (lp - lm) / (2 * h), 1e-6 + 1e-5 * std::abs(g[i])) << p.name << "[" << i << "]";
    }
  }
}

// Modules report the layouts they hold themselves (checkpoints find them by this virtual, not
// by layer type): a block-sparse linear its block layout, an attention layer its attention
// layout, others none; only a module with a block layout switches it through the virtual.
TEST(Module, ReportsItsOwnLayouts) {
  Generator gen(0);
  nn::Linear dense(nn::LinearOptions(8, 8), gen);
  EXPECT_EQ(dense.layouts().block, nullptr);
  EXPECT_EQ(dense.layouts().attention, nullptr);
  LayoutPtr a = BlockLayout::from_mask(16, 16, 8, {1, 0, 1, 1});
  expect_error<ValueError>([&] { dense.set_block_layout(a); }, {"set_block_layout", "no block layout"});

  LayoutPtr b = BlockLayout::from_mask(16, 16, 8, {1, 1, 0, 1});
  nn::BlockSparseLinear sparse(nn::BlockSparseLinearOptions(a), gen);
  EXPECT_EQ(sparse.layouts().block, a);
  EXPECT_EQ(sparse.layouts().attention, nullptr);
  nn::Module& as_module = sparse;
  as_module.set_block_layout(b);
  EXPECT_EQ(sparse.layout(), b);
  EXPECT_EQ(as_module.layouts().block, b);

  nn::MultiHeadAttention attn(nn::AttentionOptions(16, 2, 32).block_size(8).layout(Kind::local).window(2), gen);
  EXPECT_EQ(attn.layouts().attention, attn.layout());
  EXPECT_NE(attn.layouts().attention, nullptr);
  EXPECT_EQ(attn.layouts().block, nullptr);
  // A container reports none of its submodules' layouts (they report their own).
  Bag bag;
  bag.add("sparse", std::make_shared<nn::BlockSparseLinear>(nn::BlockSparseLinearOptions(a), gen));
  EXPECT_EQ(bag.layouts().block, nullptr);
}

}  // namespace
}  // namespace tessera
