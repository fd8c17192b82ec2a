// nn::TransformerBlock: shapes and parameter paths, the pre-LN composition against its own
// submodules, activations, errors, f64 gradient checks (dense and block-sparse weights); under
// bf16/f16 autocast, bitwise the block with explicit casts before its products, with fewer kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "layers/layers.h"

namespace tessera {
namespace {

using Kind = nn::AttentionLayoutKind;

using testing::all_close;
using testing::expect_error;
using testing::gradcheck;
using testing::parameters_gradcheck;
using testing::test_randn;

nn::TransformerBlockOptions tiny(int64_t C, int64_t H, int64_t T) {
  return nn::TransformerBlockOptions(nn::AttentionOptions(C, H, T).block_size(8).dtype(DType::f64))
      .mlp_ratio(2);
}

TEST(TransformerBlock, ShapesAndParameterPaths) {
  Generator gen(1);
  nn::TransformerBlock blk(nn::TransformerBlockOptions(nn::AttentionOptions(32, 4, 32).block_size(16)), gen);
  std::vector<std::string> names;
  for (const auto& p : blk.named_parameters()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"ln1.gamma", "ln1.beta", "attn.qkv.weight", "attn.qkv.bias",
                                             "attn.proj.weight", "attn.proj.bias", "ln2.gamma", "ln2.beta",
                                             "fc.weight", "fc.bias", "fc2.weight", "fc2.bias"}));
  const int64_t C = 32, M = 4 * C;
  EXPECT_EQ(blk.num_parameters(),
            2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * M + M) + (M * C + C));
  for (int64_t B : {1, 3}) {
    Tensor y = blk.forward(test_randn({B * 32, 32}, 2, DType::f32), B);
    EXPECT_EQ(y.shape(), Shape({B * 32, 32}));
    EXPECT_EQ(y.dtype(), DType::f32);
  }
  // Block-sparse MLP and attention projections.
  nn::TransformerBlock sp(
      nn::TransformerBlockOptions(nn::AttentionOptions(32, 4, 32).block_size(16).linear_block_size(16))
          .linear_block_size(16)
          .density(0.5, 4),
      gen);
  ASSERT_TRUE(sp.fc().sparse() && sp.fc2().sparse() && sp.attention().qkv().sparse());
  EXPECT_EQ(sp.fc().sparse()->layout()->nnz(), 8);  // 2x8 blocks at density 0.5
  EXPECT_EQ(sp.forward(test_randn({64, 32}, 3, DType::f32), 2).shape(), Shape({64, 32}));
}

TEST(TransformerBlock, PreLayerNormComposition) {
  Generator gen(2);
  for (nn::Activation act : {nn::Activation::gelu, nn::Activation::gelu_tanh, nn::Activation::fast_gelu}) {
    SCOPED_TRACE(nn::activation_name(act));
    nn::TransformerBlock blk(tiny(8, 2, 16).activation(act), gen);
    // Move LayerNorm parameters off their ones/zeros init so they matter.
    std::vector<nn::NamedParam> ps = blk.named_parameters();
    for (const auto& p : ps) {
      if (p.name.find("ln") != 0) continue;
      std::vector<double> r = test_randn(p.tensor.shape(), 3).to_vector<double>();
      double* v = p.tensor.data<double>();
      for (int64_t i = 0; i < p.tensor.numel(); ++i) v[i] += 0.5 * r[i];
    }
    const auto& named = blk.named_children();
    auto child = [&](const std::string& n) {
      for (const auto& c : named)
        if (c.first == n) return c.second;
      return std::shared_ptr<nn::Module>();
    };
    auto ln1 = std::dynamic_pointer_cast<nn::LayerNorm>(child("ln1"));
    auto ln2 = std::dynamic_pointer_cast<nn::LayerNorm>(child("ln2"));
    ASSERT_TRUE(ln1 && ln2);
    Tensor x = test_randn({32, 8}, 4);
    Tensor h = add(x, blk.attention().forward(ln1->forward(x), 2));
    Tensor a = blk.fc().dense()->forward(ln2->forward(h));
    Tensor g = act == nn::Activation::gelu        ? gelu(a)
               : act == nn::Activation::gelu_tanh ? gelu(a, GeluApprox::tanh)
                                                  : mul(a, sigmoid(mul(a, 1.702)));
    Tensor expected = add(h, blk.fc2().dense()->forward(g));
    EXPECT_TRUE(all_close(blk.forward(x, 2), expected, 1e-12, 1e-12));
  }
}

TEST(TransformerBlock, Errors) {
  Generator gen(3);
  expect_error<ValueError>([] { nn::activation_from_string("swish"); }, {"swish", "gelu_tanh"});
  expect_error<ValueError>([&] { nn::TransformerBlock(tiny(8, 2, 16).mlp_ratio(0), gen); },
                           {"TransformerBlock", "mlp_ratio"});
  expect_error<ValueError>([&] { nn::TransformerBlock(tiny(8, 3, 16), gen); }, {"width 8", "heads 3"});
  nn::TransformerBlock blk(tiny(8, 2, 16), gen);
  expect_error<ShapeError>([&] { blk.forward(test_randn({32, 8}), 3); }, {"MultiHeadAttention", "[32, 8]"});
  EXPECT_EQ(nn::activation_from_string("fast_gelu"), nn::Activation::fast_gelu);
}

TEST(TransformerBlock, Gradients) {
  Generator gen(4);
  {
    SCOPED_TRACE("dense, gelu_tanh, strided");
    nn::TransformerBlock blk(
        nn::TransformerBlockOptions(
            nn::AttentionOptions(8, 2, 16).block_size(8).layout(Kind::strided).stride(1).dtype(DType::f64))
            .mlp_ratio(2)
            .activation(nn::Activation::gelu_tanh),
        gen);
    Tensor x = test_randn({32, 8}, 5);
    EXPECT_TRUE(parameters_gradcheck(blk.named_parameters(), [&] { return blk.forward(x, 2); }, {}, 78));
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& a) { return blk.forward(a[0], 2); }, {x}));
  }
  {
    SCOPED_TRACE("block-sparse, fast_gelu, local");
    nn::TransformerBlock blk(nn::TransformerBlockOptions(nn::AttentionOptions(16, 2, 16)
                                                             .block_size(8)
                                                             .layout(Kind::local)
                                                             .window(1)
                                                             .linear_block_size(8)
                                                             .density(0.5, 1)
                                                             .dtype(DType::f64))
                                 .mlp_ratio(2)
                                 .activation(nn::Activation::fast_gelu)
                                 .linear_block_size(8)
                                 .density(0.5, 2),
                             gen);
    ASSERT_TRUE(blk.fc().sparse());
    EXPECT_EQ(blk.fc().sparse()->layout()->nnz(), 4);  // 2x4 blocks at density 0.5
    Tensor x = test_randn({16, 16}, 6);
    EXPECT_TRUE(parameters_gradcheck(blk.named_parameters(), [&] { return blk.forward(x, 1); }, {}, 78));
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& a) { return blk.forward(a[0], 1); }, {x}));
  }
}

// The child module `name` of m as a T.
template <class T>
std::shared_ptr<T> child_of(const nn::Module& m, const std::string& name) {
  for (const auto& c : m.named_children())
    if (c.first == name) return std::dynamic_pointer_cast<T>(c.second);
  return nullptr;
}

// The block's forward as it was before its layer norms and activation wrote the autocast dtype:
// f32 outputs everywhere, each cast by the product that reads it (autocast::operand).
Tensor forward_with_explicit_casts(const nn::TransformerBlock& blk, const Tensor& x, int64_t B) {
  const auto ln1 = child_of<nn::LayerNorm>(blk, "ln1"), ln2 = child_of<nn::LayerNorm>(blk, "ln2");
  Tensor h = add(x, blk.attention().forward(ln1->forward(x), B));
  const Tensor u = cast(blk.fc().forward(ln2->forward(h)), autocast::dtype());  // fc's f32 output rounded
  Tensor m = blk.fc2().forward(nn::apply_activation(blk.options().activation(), u));
  return add(h, m);
}

// Under autocast, forward and backward of the block equal those of the explicit-cast formulation
// bit for bit (output, input gradient, every parameter gradient), with the casts of ln1, ln2 and
// fc's output gone from both passes (fc writes the activation's input in the low dtype; the
// activation reads and writes it).
TEST(TransformerBlock, AutocastWritesTheProductOperandsDirectlyBitwise) {
  const int64_t B = 2, T = 16, C = 16;
  for (DType low : {DType::bf16, DType::f16})
    for (int64_t lb : {int64_t{0}, int64_t{8}})
      for (nn::Activation act : {nn::Activation::gelu, nn::Activation::gelu_tanh, nn::Activation::fast_gelu}) {
        SCOPED_TRACE(std::string(dtype_name(low)) + (lb ? " block-sparse " : " dense ") +
                     nn::activation_name(act));
        const nn::TransformerBlockOptions o =
            nn::TransformerBlockOptions(nn::AttentionOptions(C, 2, T).block_size(8).linear_block_size(lb).density(
                                            lb ? 0.5 : 1.0, 3))
                .mlp_ratio(3)
                .activation(act)
                .linear_block_size(lb)
                .density(lb ? 0.5 : 1.0, 4);
        Generator g1(9), g2(9);
        nn::TransformerBlock now(o, g1), before(o, g2);
        for (const auto& p : now.named_parameters())  // layer norm parameters off ones/zeros
          if (p.name.find("ln") == 0) {
            std::vector<double> r = test_randn(p.tensor.shape(), 3).to_vector<double>();
            float* v = p.tensor.data<float>();
            for (int64_t i = 0; i < p.tensor.numel(); ++i) v[i] += 0.5f * static_cast<float>(r[i]);
          }
        for (size_t i = 0; i < now.named_parameters().size(); ++i) {  // the same values in both
          const Tensor a = now.named_parameters()[i].tensor;  // a copy: the vector is a temporary
          std::memcpy(before.named_parameters()[i].tensor.data_ptr(), a.data_ptr(), a.nbytes());
        }
        const Tensor x0 = test_randn({B * T, C}, 5, DType::f32), w = test_randn({B * T, C}, 6, DType::f32);
        Tensor x1 = x0.detach().clone().requires_grad_(), x2 = x0.detach().clone().requires_grad_();
        Tensor y1, y2;
        uint64_t k0 = kernels_run();
        {
          autocast::Guard amp(low);
          y1 = now.forward(x1, B);
        }
        const uint64_t fwd_now = kernels_run() - k0;
        k0 = kernels_run();
        {
          autocast::Guard amp(low);
          y2 = forward_with_explicit_casts(before, x2, B);
        }
        const uint64_t fwd_before = kernels_run() - k0;
        ASSERT_EQ(y1.dtype(), DType::f32);
        EXPECT_TRUE(all_close(y1, y2, 0, 0));
        k0 = kernels_run();
        sum(mul(y1, w)).backward();
        const uint64_t bwd_now = kernels_run() - k0;
        k0 = kernels_run();
        sum(mul(y2, w)).backward();
        const uint64_t bwd_before = kernels_run() - k0;
        EXPECT_TRUE(all_close(x1.grad(), x2.grad(), 0, 0));
        const std::vector<nn::NamedParam> p1 = now.named_parameters(), p2 = before.named_parameters();
        for (size_t i = 0; i < p1.size(); ++i) {
          ASSERT_TRUE(p1[i].tensor.grad().defined()) << p1[i].name;
          EXPECT_EQ(p1[i].tensor.grad().dtype(), DType::f32) << p1[i].name;
          EXPECT_TRUE(all_close(p1[i].tensor.grad(), p2[i].tensor.grad(), 0, 0)) << p1[i].name;
        }
        const uint64_t casts = 3;
        EXPECT_EQ(fwd_before - fwd_now, casts);
        EXPECT_EQ(bwd_before - bwd_now, casts);
      }
}

TEST(TransformerBlock, WithoutAutocastNothingIsNarrowed) {
  Generator gen(10);
  nn::TransformerBlock blk(
      nn::TransformerBlockOptions(nn::AttentionOptions(8, 2, 16).block_size(8)).mlp_ratio(2), gen);
  const Tensor x = test_randn({32, 8}, 11, DType::f32);
  EXPECT_TRUE(all_close(blk.forward(x, 2), forward_with_explicit_casts(blk, x, 2), 0, 0));
  EXPECT_EQ(nn::apply_activation(nn::Activation::gelu, x, DType::f32).dtype(), DType::f32);
  EXPECT_EQ(nn::apply_activation(nn::Activation::gelu_tanh, x, DType::bf16).dtype(), DType::bf16);
  EXPECT_EQ(nn::apply_activation(nn::Activation::fast_gelu, x, DType::f16).dtype(), DType::f16);
}

}  // namespace
}  // namespace tessera
