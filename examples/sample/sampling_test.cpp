// Tests of the sample program's next-token sampling (examples/sample/sampling.h).
#include "examples/sample/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/error.h"

namespace tessera {
namespace examples {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, -2.0f, 2.5f, 0.0f};

// softmax(l / T) over the ids in `keep`, computed directly.
std::vector<double> reference(const std::vector<float>& l, double T, const std::vector<int>& keep) {
  std::vector<double> p(l.size(), 0.0);
  double z = 0;
  for (int i : keep) z += std::exp(l[i] / T);
  for (int i : keep) p[i] = std::exp(l[i] / T) / z;
  return p;
}

void expect_near(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "id " << i;
}

TEST(Sampling, ProbabilitiesAreTheTemperedSoftmax) {
  for (double T : {0.5, 1.0, 2.0}) {
    const auto p = sampling_probabilities(kLogits, {T, 0});
    expect_near(p, reference(kLogits, T, {0, 1, 2, 3, 4}), 1e-12);
    EXPECT_NEAR(std::accumulate(p.begin(), p.end(), 0.0), 1.0, 1e-12);
  }
  // Lower temperature sharpens: the best token gains mass.
  EXPECT_GT(sampling_probabilities(kLogits, {0.5, 0})[1], sampling_probabilities(kLogits, {2.0, 0})[1]);
}

TEST(Sampling, TopKKeepsTheKLargestAndRenormalizes) {
  expect_near(sampling_probabilities(kLogits, {1.0, 2}), reference(kLogits, 1.0, {1, 3}), 1e-12);
  expect_near(sampling_probabilities(kLogits, {0.7, 3}), reference(kLogits, 0.7, {0, 1, 3}), 1e-12);
  expect_near(sampling_probabilities(kLogits, {1.0, 1}), {0, 1, 0, 0, 0}, 0);
  // k >= V is the same as no top-k.
  expect_near(sampling_probabilities(kLogits, {1.0, 5}), sampling_probabilities(kLogits, {1.0, 0}), 0);
  expect_near(sampling_probabilities(kLogits, {1.0, 99}), sampling_probabilities(kLogits, {1.0, 0}), 0);
  // Ties at the cut go to the lower id.
  expect_near(sampling_probabilities({1.0f, 2.0f, 2.0f, 2.0f}, {1.0, 2}), {0, 0.5, 0.5, 0}, 1e-12);
}

TEST(Sampling, GreedyIsTheFirstLargestAndDrawsNothing) {
  expect_near(sampling_probabilities(kLogits, {0.0, 0}), {0, 1, 0, 0, 0}, 0);
  Generator gen(3);
  EXPECT_EQ(sample_token({0.5f, 4.0f, 4.0f}, {0.0, 0}, gen), 1);
  EXPECT_EQ(sample_token(kLogits, {0.0, 2}, gen), 1);
  EXPECT_EQ(gen.offset(), 0u);
}

TEST(Sampling, SameSeedSameTokens) {
  Generator a(7), b(7), c(8);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 200; ++i) {
    ta.push_back(sample_token(kLogits, {1.5, 0}, a));
    tb.push_back(sample_token(kLogits, {1.5, 0}, b));
    tc.push_back(sample_token(kLogits, {1.5, 0}, c));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(Sampling, DrawFrequenciesMatchTheProbabilities) {
  const int n = 40000;
  for (const SamplingOptions& o : {SamplingOptions{1.0, 0}, SamplingOptions{2.0, 3}}) {
    const auto p = sampling_probabilities(kLogits, o);
    std::vector<int> hits(kLogits.size(), 0);
    Generator gen(11);
    for (int i = 0; i < n; ++i) ++hits.at(sample_token(kLogits, o, gen));
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i] == 0) {
        EXPECT_EQ(hits[i], 0) << "id " << i << " is outside the top-k";
        continue;
      }
      const double sd = std::sqrt(p[i] * (1 - p[i]) / n);  // binomial standard error
      EXPECT_NEAR(static_cast<double>(hits[i]) / n, p[i], 5 * sd) << "id " << i;
    }
  }
}

TEST(Sampling, BadInputIsAValueError) {
  EXPECT_THROW(sampling_probabilities({}, {1.0, 0}), ValueError);
  EXPECT_THROW(sampling_probabilities(kLogits, {-1.0, 0}), ValueError);
  EXPECT_THROW(sampling_probabilities(kLogits, {NAN, 0}), ValueError);
  EXPECT_THROW(sampling_probabilities(kLogits, {1.0, -1}), ValueError);
  EXPECT_THROW(sampling_probabilities({1.0f, NAN}, {1.0, 0}), ValueError);
  EXPECT_THROW(sampling_probabilities({1.0f, INFINITY}, {1.0, 0}), ValueError);
}

}  // namespace
}  // namespace examples
}  // namespace tessera
