// nn::Projection: dense, block-sparse with a random layout, block-sparse with a given layout
// (what LSTMCell's weights use); each the same layer, with the same initial values, as the one it
// wraps made directly (the block-sparse one with BlockSparseInit::uniform, nn::Linear's rule).
#include "layers/projection.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/sparse/generators.h"
#include "gradcheck.h"

namespace tessera {
namespace {

using nn::Projection;
using nn::ProjectionOptions;
using testing::all_close;
using testing::expect_error;

std::vector<std::string> names(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& p : m.named_parameters()) out.push_back(p.name);
  return out;
}

TEST(Projection, DenseIsALinear) {
  Generator g1(3), g2(3);
  Projection p(ProjectionOptions(6, 4).bias(false), g1);
  nn::Linear l(nn::LinearOptions(6, 4).bias(false), g2);
  ASSERT_TRUE(p.dense());
  EXPECT_FALSE(p.sparse());
  EXPECT_EQ(names(*p.module()), (std::vector<std::string>{"weight"}));
  EXPECT_TRUE(all_close(p.dense()->weight(), l.weight(), 0, 0));
}

TEST(Projection, AGivenLayoutIsABlockSparseLinearOnIt) {
  const LayoutPtr layout = random_layout(16, 32, 8, 0.5, 9);
  Generator g1(4), g2(4);
  Projection p(ProjectionOptions(16, 32).layout(layout).bias(false), g1);
  nn::BlockSparseLinear l(nn::BlockSparseLinearOptions(layout).bias(false).init(nn::BlockSparseInit::uniform), g2);
  ASSERT_TRUE(p.sparse());
  EXPECT_FALSE(p.dense());
  EXPECT_EQ(p.sparse()->layout(), layout);
  EXPECT_EQ(names(*p.module()), names(l));
  const Tensor x = testing::test_randn({3, 16}, 1, DType::f32);
  EXPECT_TRUE(all_close(p.forward(x), l.forward(x), 0, 0));
  // The random layout of block_size/density: a block-sparse layer too.
  Generator g3(4);
  Projection r(ProjectionOptions(16, 32).block_size(8).density(0.5, 9), g3);
  ASSERT_TRUE(r.sparse());
  EXPECT_EQ(r.sparse()->layout()->block_size(), 8);
}

double rms_of(const Tensor& t) {
  double s = 0;
  const std::vector<double> v = t.to_vector<double>();
  for (double x : v) s += x * x;
  return std::sqrt(s / static_cast<double>(v.size()));
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : t.to_vector<double>()) m = std::max(m, std::abs(x));
  return m;
}

// A block-sparse projection 1024 -> 512 at 1/4 density (each output reads 256 inputs) starts
// like a dense 256 -> 512 one: weight and bias U(±1/sqrt(256)), RMS 1/sqrt(3·256), so that a
// dense-against-sparse comparison compares layouts, not inits (N(0, 1/fan_in) before: √3 larger).
TEST(Projection, DenseAndBlockSparseWeightsStartWithOneVariancePerOutput) {
  Generator g1(5), g2(5);
  Projection sparse(ProjectionOptions(1024, 512).block_size(32).density(0.25, 3), g1);
  Projection dense(ProjectionOptions(256, 512), g2);
  const auto& l = *sparse.sparse()->layout();
  const double fan_in = static_cast<double>(l.nnz() * 32 * 32) / 512.0, bound = 1.0 / std::sqrt(fan_in);
  const Tensor ws = sparse.sparse()->weight(), bs = sparse.sparse()->bias();
  const double want = bound / std::sqrt(3.0);  // the RMS of U(−b, b)
  EXPECT_NEAR(rms_of(ws), want, 0.01 * want);
  EXPECT_NEAR(rms_of(dense.dense()->weight()), 1.0 / std::sqrt(3.0 * 256), 0.01 * want);
  EXPECT_LE(max_abs(ws), bound);
  EXPECT_NEAR(rms_of(bs), want, 0.1 * want);  // 512 draws
  EXPECT_LE(max_abs(bs), bound);
}

TEST(Projection, Errors) {
  const LayoutPtr layout = dense_layout(16, 32, 8);
  expect_error<ShapeError>([&] { Projection p(ProjectionOptions(16, 16).layout(layout), default_generator()); },
                           {"Projection", "layout", "[16, 16]"});
  expect_error<ValueError>(
      [&] { Projection p(ProjectionOptions(16, 32).layout(layout).block_size(16), default_generator()); },
      {"Projection", "block size 16"});
  expect_error<ValueError>([&] { Projection p(ProjectionOptions(16, 32).block_size(-1), default_generator()); },
                           {"Projection", "block size"});
  expect_error<ValueError>([] { Projection().forward(zeros({2, 2})); }, {"Projection", "empty"});
}

}  // namespace
}  // namespace tessera
