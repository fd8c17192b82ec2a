#include <gtest/gtest.h>

#include <cmath>

#include "core/philox.h"
#include "core/random.h"

namespace tessera {
namespace {

// Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors).
TEST(Philox, KnownAnswers) {
  auto z = philox::philox4x32_10(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(z.w[0], 0x6627e8d5u);
  EXPECT_EQ(z.w[1], 0xe169c58du);
  EXPECT_EQ(z.w[2], 0xbc57ac4cu);
  EXPECT_EQ(z.w[3], 0x9b00dbd8u);
  auto f = philox::philox4x32_10(~0u, ~0u, ~0u, ~0u, ~0u, ~0u);
  EXPECT_EQ(f.w[0], 0x408f276du);
  EXPECT_EQ(f.w[1], 0x41c83b0eu);
  EXPECT_EQ(f.w[2], 0xa20bc7c6u);
  EXPECT_EQ(f.w[3], 0x6d5451fdu);
  auto p = philox::philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(p.w[0], 0xd16cfe09u);
  EXPECT_EQ(p.w[1], 0x94fdccebu);
  EXPECT_EQ(p.w[2], 0x5001e420u);
  EXPECT_EQ(p.w[3], 0x24126ea1u);
}

TEST(Generator, SameSeedAndOffsetGiveSameStream) {
  Generator a(7), b(7);
  EXPECT_EQ(normal({1000}, 0, 1, a).to_vector<float>(), normal({1000}, 0, 1, b).to_vector<float>());
  Generator c(8);
  EXPECT_NE(normal({1000}, 0, 1, a).to_vector<float>(), normal({1000}, 0, 1, c).to_vector<float>());
}

TEST(Generator, StreamResumesExactlyFromSavedState) {
  Generator gen(42);
  uniform({37}, 0, 1, gen);
  Generator::State saved = gen.state();
  std::vector<float> first = normal({101}, 0, 1, gen).to_vector<float>();
  std::vector<double> second = uniform({13}, -1, 1, gen, DType::f64).to_vector<double>();
  Generator resumed;
  resumed.set_state(saved);
  EXPECT_EQ(normal({101}, 0, 1, resumed).to_vector<float>(), first);
  EXPECT_EQ(uniform({13}, -1, 1, resumed, DType::f64).to_vector<double>(), second);
  EXPECT_EQ(resumed.state(), gen.state());
}

TEST(Generator, OffsetAdvancesByBlocksUsed) {
  Generator gen(1);
  uniform({10}, 0, 1, gen);  // 10 f32 uniforms: 3 blocks of 4
  EXPECT_EQ(gen.offset(), 3u);
  normal({5}, 0, 1, gen);  // 5 f32 normals: 3 blocks of 2
  EXPECT_EQ(gen.offset(), 6u);
}

TEST(Generator, ElementsMatchTheDocumentedLayout) {
  // A draw is a pure function of (seed, start block, element index): what a GPU kernel computes.
  Generator gen(99, 5);
  std::vector<float> u = uniform({9}, 0, 1, gen).to_vector<float>();
  for (uint64_t i = 0; i < 9; ++i) EXPECT_EQ(u[i], philox::uniform_f32(99, 5, i));
}

TEST(Distributions, NormalMomentsWithinBounds) {
  Generator gen(2024);
  const int n = 200000;
  std::vector<double> v = normal({n}, 1.5, 2.0, gen, DType::f64).to_vector<double>();
  double m = 0, m2 = 0, m3 = 0, m4 = 0;
  for (double x : v) m += x;
  m /= n;
  for (double x : v) {
    double d = (x - 1.5) / 2.0;
    m2 += d * d;
    m3 += d * d * d;
    m4 += d * d * d * d;
  }
  m2 /= n, m3 /= n, m4 /= n;
  // Standard errors: mean 2/sqrt(n) ~ 0.0045, var ~ sqrt(2/n) ~ 0.0032, skew ~ 0.0055, kurt ~ 0.011.
  EXPECT_NEAR(m, 1.5, 0.02);
  EXPECT_NEAR(m2, 1.0, 0.02);
  EXPECT_NEAR(m3, 0.0, 0.03);
  EXPECT_NEAR(m4, 3.0, 0.06);
  std::vector<float> f = normal({n}, 0, 1, gen).to_vector<float>();
  double fm = 0, fv = 0;
  for (float x : f) fm += x;
  fm /= n;
  for (float x : f) fv += (x - fm) * (x - fm);
  EXPECT_NEAR(fm, 0.0, 0.02);
  EXPECT_NEAR(fv / n, 1.0, 0.02);
}

TEST(Distributions, UniformRangeAndMean) {
  Generator gen(3);
  std::vector<float> v = uniform({100000}, -2, 3, gen).to_vector<float>();
  double m = 0;
  for (float x : v) {
    ASSERT_GE(x, -2.0f);
    ASSERT_LT(x, 3.0f);
    m += x;
  }
  EXPECT_NEAR(m / v.size(), 0.5, 0.02);
}

TEST(Distributions, BernoulliFrequency) {
  Generator gen(4);
  std::vector<float> v = bernoulli({100000}, 0.3, gen).to_vector<float>();
  double ones = 0;
  for (float x : v) {
    ASSERT_TRUE(x == 0.0f || x == 1.0f);
    ones += x;
  }
  EXPECT_NEAR(ones / v.size(), 0.3, 0.01);
  EXPECT_THROW(bernoulli({3}, 1.5, gen), ValueError);
}

}  // namespace
}  // namespace tessera
