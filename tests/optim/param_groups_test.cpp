// Parameter groups: the default no-decay rule on parameter paths (also those of real layers),
// param_groups_default, per-group weight decay in the optimizers, and errors.
#include <gtest/gtest.h>

#include <memory>

#include "gradcheck.h"
#include "kernels/ops.h"
#include "layers/embedding.h"
#include "layers/layer_norm.h"
#include "layers/linear.h"
#include "optim/optim.h"

namespace tessera {
namespace {

using optim::no_weight_decay;
using optim::ParamGroup;
using testing::all_close;
using testing::expect_error;

TEST(ParamGroups, DefaultRule) {
  for (const char* path : {"fc.bias", "bias", "blocks.0.ln1.gamma", "blocks.0.ln1.beta", "ln_f.gamma", "lstm.0.gamma_x",
                           "lstm.1.bias", "fc.gain", "wn.g", "tok_emb.weight", "pos_emb", "embed.weight",
                           "embedding.weight", "norm.gamma", "sparse_norm.beta", "blocks.2.layernorm.weight",
                           "ln.scale", "blocks.0.ln2.anything"})
    EXPECT_TRUE(no_weight_decay(path)) << path;
  for (const char* path : {"fc.weight", "weight", "blocks.0.attn.qkv.weight", "lstm.0.wx.weight", "fc.gate",
                           "linear.weight", "lnk.weight", "member.weight", "gammas_are_not_gains.weight", "out.weight",
                           "biased_fc.weight", "g.weight"})
    EXPECT_FALSE(no_weight_decay(path)) << path;
}

class Net : public nn::Module {
 public:
  Net() {
    Generator gen(1);
    embed_ = register_module("embed", std::make_shared<nn::Embedding>(nn::EmbeddingOptions(5, 4), gen));
    fc_ = register_module("fc", std::make_shared<nn::Linear>(nn::LinearOptions(4, 3), gen));
    norm_ = register_module("norm", std::make_shared<nn::LayerNorm>(nn::LayerNormOptions(3)));
    out_ = register_module("out", std::make_shared<nn::Linear>(nn::LinearOptions(3, 2).bias(false), gen));
  }
  std::shared_ptr<nn::Embedding> embed_;
  std::shared_ptr<nn::Linear> fc_;
  std::shared_ptr<nn::LayerNorm> norm_;
  std::shared_ptr<nn::Linear> out_;
};

TEST(ParamGroups, DefaultGroupsOfALayerStack) {
  Net net;
  std::vector<graph::NamedParam> named = net.named_parameters();
  std::vector<ParamGroup> groups = optim::param_groups_default(named, 0.1);
  ASSERT_EQ(groups.size(), 2u);
  // Decayed: fc.weight, out.weight (in model order); the rest without decay.
  ASSERT_EQ(groups[0].params.size(), 2u);
  EXPECT_EQ(groups[0].weight_decay.value_or(-1), 0.1);
  EXPECT_TRUE(groups[0].params[0].same(net.fc_->named_parameters()[0].tensor));
  EXPECT_TRUE(groups[0].params[1].same(net.out_->named_parameters()[0].tensor));
  EXPECT_EQ(groups[1].weight_decay.value_or(-1), 0.0);
  EXPECT_EQ(groups[1].params.size(), named.size() - 2);  // embed.weight, fc.bias, norm.gamma, norm.beta
  optim::AdamW opt(groups, optim::AdamWOptions(1e-3));
  ASSERT_EQ(opt.params().size(), named.size());
  EXPECT_EQ(opt.weight_decay(0), 0.1);
  EXPECT_EQ(opt.weight_decay(1), 0.1);
  for (size_t i = 2; i < named.size(); ++i) EXPECT_EQ(opt.weight_decay(i), 0.0);
  // Only decayed or only undecayed parameters: one group.
  EXPECT_EQ(optim::param_groups_default({named[0]}, 0.1).size(), 1u);
  EXPECT_TRUE(optim::param_groups_default({}, 0.1).empty());
}

TEST(ParamGroups, PerGroupDecayInTheUpdate) {
  // Plain SGD: p1 = p0 - lr·(g + wd·p0) with each group's wd (unset: the options' 0.1).
  Tensor w = tensor({1.0, -2.0}, DType::f64).requires_grad_(), b = tensor({3.0}, DType::f64).requires_grad_();
  optim::SGD opt({{{w}}, {{b}, 0.5}}, optim::SGDOptions(0.2).weight_decay(0.1));
  w.set_grad(tensor({0.5, 0.5}, DType::f64));
  b.set_grad(tensor({1.0}, DType::f64));
  opt.step();
  EXPECT_TRUE(all_close(w, {1.0 - 0.2 * (0.5 + 0.1 * 1.0), -2.0 - 0.2 * (0.5 - 0.1 * 2.0)}, 1e-15));
  EXPECT_TRUE(all_close(b, {3.0 - 0.2 * (1.0 + 0.5 * 3.0)}, 1e-15));
  // Adam, AdamW, Adafactor take groups the same way.
  optim::Adam adam({{{w}, 0.0}, {{b}}}, optim::AdamOptions().weight_decay(0.3));
  EXPECT_EQ(adam.weight_decay(0), 0.0);
  EXPECT_EQ(adam.weight_decay(1), 0.3);
  optim::Adafactor ada({{{w}, 0.2}}, optim::AdafactorOptions());
  EXPECT_EQ(ada.weight_decay(0), 0.2);
}

TEST(ParamGroups, Errors) {
  Tensor w = zeros({2}).requires_grad_();
  expect_error<ValueError>([&] { optim::SGD({{{w}}, {{w}, 0.0}}, optim::SGDOptions(0.1)); }, {"optimizer", "twice"});
  expect_error<ValueError>([&] { optim::AdamW({{{w}, -1.0}}); }, {"optimizer", "group 0", "weight_decay"});
}

}  // namespace
}  // namespace tessera
