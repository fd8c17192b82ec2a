#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd.h"
#include "core/graph/compile.h"
#include "core/sparse/generators.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "layers/block_sparse_linear.h"

namespace tessera {
namespace {

using nn::BlockSparseInit;
using nn::BlockSparseLinear;
using nn::BlockSparseLinearOptions;
using testing::all_close;
using testing::dense_from_blocks;
using testing::expect_error;
using testing::parameters_gradcheck;
using testing::set_values;
using testing::test_rand;
using testing::test_randn;


// 3x4 blocks of 8 with block row 1 and block column 2 empty.
LayoutPtr holey_layout() { return BlockLayout::from_mask(24, 32, 8, {1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1}); }

TEST(BlockSparseLinear, ShapesAndParameterCount) {
  Generator gen(1);
  BlockSparseLinear plain(BlockSparseLinearOptions(64, 96, 16).density(0.25, 3), gen);
  const int64_t nnz = plain.layout()->nnz();
  EXPECT_LT(nnz, 4 * 6);
  EXPECT_EQ(plain.weight().shape(), Shape({nnz, 16, 16}));
  EXPECT_EQ(plain.bias().shape(), Shape({96}));
  EXPECT_FALSE(plain.gate().defined());
  EXPECT_EQ(plain.num_parameters(), nnz * 256 + 96);
  EXPECT_EQ(plain.forward(test_randn({5, 64}, 1, DType::f32)).shape(), Shape({5, 96}));
  EXPECT_EQ(plain.forward(test_randn({2, 3, 64}, 1, DType::f32)).shape(), Shape({2, 3, 96}));

  BlockSparseLinear all(BlockSparseLinearOptions(holey_layout()).gate(true).weight_norm(true), gen);
  std::vector<std::string> names;
  for (const auto& p : all.named_parameters()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias", "gate", "gain"}));
  EXPECT_EQ(all.num_parameters(), 4 * 64 + 32 + 4 + 32);
  BlockSparseLinear dense(BlockSparseLinearOptions(32, 16, 8).bias(false), gen);  // dense by default
  EXPECT_EQ(dense.layout()->nnz(), 8);
  EXPECT_EQ(dense.num_parameters(), 32 * 16);
}

TEST(BlockSparseLinear, ForwardEqualsMaskedDenseMatmulPlusBias) {
  Generator gen(2);
  for (bool gated : {false, true}) {
    BlockSparseLinear fc(BlockSparseLinearOptions(holey_layout()).gate(gated).dtype(DType::f64), gen);
    set_values(fc.bias(), test_randn({32}, 5));
    if (gated) set_values(fc.gate(), test_randn({4}, 6));
    Tensor x = test_randn({7, 24}, 7);
    std::vector<double> wd = dense_from_blocks(fc.weight(), *fc.layout(), fc.gate()), xv = x.to_vector<double>(),
                        bv = fc.bias().to_vector<double>(), ref(7 * 32);
    for (int n = 0; n < 7; ++n)
      for (int j = 0; j < 32; ++j) {
        ref[n * 32 + j] = bv[j];
        for (int i = 0; i < 24; ++i) ref[n * 32 + j] += xv[n * 24 + i] * wd[i * 32 + j];
      }
    EXPECT_TRUE(all_close(fc.forward(x), ref, 1e-12, 1e-12)) << "gated " << gated;
  }
}

TEST(BlockSparseLinear, GradientsReachEveryParameter) {
  Generator gen(3);
  for (bool wn : {false, true}) {
    BlockSparseLinear fc(
        BlockSparseLinearOptions(holey_layout()).gate(true).weight_norm(wn).dtype(DType::f64).init_std(0.5), gen);
    set_values(fc.gate(), test_rand({4}, 0.5, 1.5, 4));
    if (wn) set_values(fc.gain(), test_rand({32}, 0.5, 2.0, 5));
    for (int64_t n : {1, 3}) {
      const Tensor x = test_randn({n, 24}, 8);
      EXPECT_TRUE(parameters_gradcheck(fc.named_parameters(), [&] { return fc.forward(x); }, {}, 99))
          << "weight_norm " << wn << " N=" << n;
      EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& a) { return fc.forward(a[0]); },
                                     {test_randn({n, 24}, 9)}));
    }
  }
}

TEST(BlockSparseLinear, CompiledStepMatchesEager) {
  Generator gen(9);
  BlockSparseLinear fc(BlockSparseLinearOptions(holey_layout()).gate(true).weight_norm(true).dtype(DType::f64), gen);
  set_values(fc.gain(), test_rand({32}, 0.5, 2.0, 5));
  Tensor x = test_randn({5, 24}, 10), r = test_randn({5, 32}, 11);
  auto loss_fn = [&](const std::map<std::string, Tensor>& in) { return sum(mul(fc.forward(in.at("x")), r)); };
  fc.zero_grad();
  Tensor eager = loss_fn({{"x", x}});
  eager.backward();
  CompiledStep step(loss_fn, fc.named_parameters(), nullptr, {{"x", x}});
  EXPECT_NEAR(step.run({{"x", x}}), eager.item<double>(), 1e-12);
  for (const auto& p : fc.named_parameters())
    EXPECT_TRUE(all_close(step.fetch("grad/" + p.name), p.tensor.grad(), 1e-12, 1e-12)) << p.name;
}

// Dynamic sparsity at a fixed block budget: a layer switched to another layout multiplies by the
// new one, eagerly and in a compiled step that ran before (it traces again: its plan's ops held
// the old layout); a layout with another block count or other sizes is refused.
TEST(BlockSparseLinear, SetLayoutSwitchesEagerAndCompiledSteps) {
  Generator gen(3);
  LayoutPtr a = BlockLayout::from_mask(24, 32, 8, {1, 1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1});  // 5 blocks
  LayoutPtr b = BlockLayout::from_mask(24, 32, 8, {0, 1, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0});  // 5 other blocks
  BlockSparseLinear fc(BlockSparseLinearOptions(a).dtype(DType::f64), gen);
  set_values(fc.bias(), test_randn({32}, 4));
  Tensor x = test_randn({5, 24}, 1), r = test_randn({5, 32}, 2);
  auto loss_fn = [&](const std::map<std::string, Tensor>& in) { return sum(mul(fc.forward(in.at("x")), r)); };
  CompiledStep step(loss_fn, fc.named_parameters(), nullptr, {{"x", x}});
  const double before = step.run({{"x", x}});
  EXPECT_NEAR(before, loss_fn({{"x", x}}).item<double>(), 1e-12);

  const uint64_t generation = layout_generation();
  fc.set_layout(b);
  EXPECT_EQ(layout_generation(), generation + 1);
  EXPECT_EQ(fc.layout(), b);
  const double want = sum(mul(add(bsmm(x, fc.weight(), b), fc.bias()), r)).item<double>();
  fc.zero_grad();
  Tensor eager = loss_fn({{"x", x}});
  eager.backward();
  EXPECT_NEAR(eager.item<double>(), want, 1e-12);
  EXPECT_GT(std::abs(want - before), 1e-6) << "the layouts give different products";
  EXPECT_NEAR(step.run({{"x", x}}), want, 1e-12) << "the compiled step traced again with the new layout";
  EXPECT_EQ(step.cached_plans(), 1u);
  for (const auto& p : fc.named_parameters())
    EXPECT_TRUE(all_close(step.fetch("grad/" + p.name), p.tensor.grad(), 1e-12, 1e-12)) << p.name;

  expect_error<ShapeError>([&] { fc.set_layout(holey_layout()); }, {"set_layout", "block count"});
  expect_error<ShapeError>([&] { fc.set_layout(random_layout(24, 48, 8, 0.3, 1)); }, {"set_layout", "K=48"});
  expect_error<ValueError>([&] { fc.set_layout(nullptr); }, {"set_layout", "no layout"});
  EXPECT_EQ(fc.layout(), b);
}

TEST(BlockSparseLinear, OrthogonalInitGivesOrthogonalBlocks) {
  Generator gen(4);
  for (int64_t bs : {8, 16, 32, 64}) {
    BlockSparseLinear fc(BlockSparseLinearOptions(2 * bs, 3 * bs, bs).density(0.5, 1).init(BlockSparseInit::orthogonal),
                         gen);
    const int64_t nnz = fc.layout()->nnz();
    std::vector<double> w = fc.weight().to_vector<double>();
    EXPECT_EQ(fc.weight().dtype(), DType::f32);
    for (int64_t k = 0; k < nnz; ++k)
      for (int64_t i = 0; i < bs; ++i)
        for (int64_t j = 0; j < bs; ++j) {  // (QᵀQ)_ij = sum_p Q_pi Q_pj
          double s = 0;
          for (int64_t p = 0; p < bs; ++p) s += w[(k * bs + p) * bs + i] * w[(k * bs + p) * bs + j];
          ASSERT_NEAR(s, i == j ? 1.0 : 0.0, 1e-5) << "bs " << bs << " block " << k << " (" << i << ", " << j << ")";
        }
  }
}

TEST(BlockSparseLinear, IdentityInitPassesInputThrough) {
  Generator gen(5);
  BlockSparseLinear fc(BlockSparseLinearOptions(48, 48, 16).init(BlockSparseInit::identity).dtype(DType::f64), gen);
  Tensor x = test_randn({5, 48}, 3);
  EXPECT_TRUE(all_close(fc.forward(x), x.to_vector<double>(), 0, 0));  // dense layout, bias 0: y = x·I
  // Off-diagonal blocks of a sparse layout are zero.
  BlockSparseLinear sp(BlockSparseLinearOptions(holey_layout()).init(BlockSparseInit::identity), gen);
  std::vector<double> w = sp.weight().to_vector<double>();  // blocks (0,0) (0,1) (2,1) (2,3)
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t j = 0; j < 8; ++j) {
      EXPECT_EQ(w[i * 8 + j], i == j ? 1.0 : 0.0);
      for (int64_t k = 1; k < 4; ++k) EXPECT_EQ(w[(k * 8 + i) * 8 + j], 0.0);
    }
}

TEST(BlockSparseLinear, WeightNormGivesColumnNormsEqualToGain) {
  Generator gen(6);
  BlockSparseLinear fc(BlockSparseLinearOptions(holey_layout()).weight_norm(true).dtype(DType::f64), gen);
  // At initialization the gain holds the column norms: W = V.
  EXPECT_TRUE(all_close(fc.effective_weight(), fc.weight(), 1e-12, 1e-12));
  Tensor gain = test_rand({32}, 0.5, 2.0, 7);
  set_values(fc.gain(), gain);
  std::vector<double> wd = dense_from_blocks(fc.effective_weight(), *fc.layout()), g = gain.to_vector<double>();
  for (int j = 0; j < 32; ++j) {
    double s = 0;
    for (int i = 0; i < 24; ++i) s += wd[i * 32 + j] * wd[i * 32 + j];
    if (j / 8 == 2) {
      EXPECT_EQ(s, 0.0) << "column " << j << " has no stored block";
    } else {
      EXPECT_NEAR(std::sqrt(s), g[j], 1e-12) << "column " << j;
    }
  }
  // The direction is unchanged: W[:, j] ∝ V[:, j].
  std::vector<double> vd = dense_from_blocks(fc.weight(), *fc.layout());
  for (int i = 0; i < 24; ++i) EXPECT_NEAR(wd[i * 32 + 1] * vd[1] , vd[i * 32 + 1] * wd[1], 1e-12);
}

TEST(BlockSparseLinear, NormalInitUsesFanIn) {
  Generator gen(7);
  BlockSparseLinear fc(BlockSparseLinearOptions(512, 256, 32).density(0.5, 2).bias(false), gen);
  const double fan_in = static_cast<double>(fc.layout()->nnz() * 32 * 32) / 256.0;
  std::vector<double> w = fc.weight().to_vector<double>();
  double ss = 0;
  for (double v : w) ss += v * v;
  EXPECT_NEAR(std::sqrt(ss / static_cast<double>(w.size())), 1.0 / std::sqrt(fan_in), 0.02 / std::sqrt(fan_in));
  // Same seed, same weights.
  Generator a(11), b(11);
  BlockSparseLinear f1(BlockSparseLinearOptions(64, 64, 16).init_std(0.1), a), f2(BlockSparseLinearOptions(64, 64, 16).init_std(0.1), b);
  EXPECT_EQ(f1.weight().to_vector<float>(), f2.weight().to_vector<float>());
}

TEST(BlockSparseLinear, Errors) {
  Generator gen(8);
  expect_error<ShapeError>([&] { BlockSparseLinear(BlockSparseLinearOptions(32, 32, 8).layout(holey_layout()), gen); },
                           {"BlockSparseLinear", "C=24", "K=32", "in 32"});
  expect_error<ValueError>([&] { BlockSparseLinear(BlockSparseLinearOptions(32, 32, 8).density(0.0), gen); },
                           {"BlockSparseLinear", "density"});
  expect_error<ValueError>([&] { BlockSparseLinear(BlockSparseLinearOptions(36, 36, 12), gen); }, {"12"});
  BlockSparseLinear fc(BlockSparseLinearOptions(holey_layout()), gen);
  expect_error<ShapeError>([&] { fc.forward(zeros({3, 25})); }, {"BlockSparseLinear", "[3, 25]", "24"});
}

}  // namespace
}  // namespace tessera
