// dropout: the Philox mask, reproducibility, statistics, identity cases, backward, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/philox.h"
#include "gradcheck.h"
#include "kernels/ops.h"

namespace tessera {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::test_randn;

// Keep mask of a draw of n elements from generator state (seed, start): u_i >= p.
std::vector<double> ref_mask(uint64_t seed, uint64_t start, int64_t n, double p) {
  std::vector<double> m(n);
  for (int64_t i = 0; i < n; ++i) m[i] = philox::uniform_f32(seed, start, i) >= p ? 1.0 : 0.0;
  return m;
}

TEST(Dropout, MaskFromPhilox) {
  Tensor x = test_randn({7, 13}, 1);
  Generator gen(42, 5);
  Tensor y = dropout(x, 0.3, gen);
  // The draw used blocks [5, 5 + ceil(91/4)) and advanced the generator past them.
  EXPECT_EQ(gen.offset(), 5u + 23u);
  std::vector<double> m = ref_mask(42, 5, 91, 0.3), xv = x.to_vector<double>(), want(91);
  for (int i = 0; i < 91; ++i) want[i] = xv[i] * m[i] / 0.7;
  EXPECT_TRUE(all_close(y, want, 1e-12));
}

TEST(Dropout, SameStateSameMask) {
  Tensor x = test_randn({5, 9}, 2, DType::f32);
  Generator a(7), b(7);
  Tensor ya = dropout(x, 0.5, a), yb = dropout(x, 0.5, b);
  EXPECT_EQ(ya.to_vector<float>(), yb.to_vector<float>());
  // The next draw continues the stream: a different mask.
  EXPECT_NE(dropout(x, 0.5, a).to_vector<float>(), ya.to_vector<float>());
  // Restoring the state reproduces the first mask.
  a.set_state({7, 0});
  EXPECT_EQ(dropout(x, 0.5, a).to_vector<float>(), ya.to_vector<float>());
}

TEST(Dropout, KeptFractionAndExpectation) {
  // n = 200001 (odd, parallel path): kept fraction ≈ 1 − p, E[y] = x (inverted scaling).
  for (double p : {0.1, 0.5, 0.8}) {
    Generator gen(3);
    Tensor y = dropout(ones({200001}, DType::f32), p, gen);
    std::vector<float> v = y.to_vector<float>();
    double kept = 0, total = 0;
    for (float e : v) {
      kept += e != 0;
      total += e;
    }
    EXPECT_NEAR(kept / v.size(), 1 - p, 0.005) << "p = " << p;
    EXPECT_NEAR(total / v.size(), 1.0, 0.02) << "p = " << p;
    for (float e : v) ASSERT_TRUE(e == 0.0f || std::abs(e - 1 / (1 - p)) < 1e-5);
  }
}

TEST(Dropout, IdentityCases) {
  Tensor x = test_randn({3, 4}, 4);
  Generator gen(9, 2);
  EXPECT_TRUE(dropout(x, 0.5, gen, /*training=*/false).same(x));
  EXPECT_TRUE(dropout(x, 0.0, gen).same(x));
  EXPECT_EQ(gen.offset(), 2u);  // nothing drawn
  EXPECT_TRUE(dropout(x, 0.5, false).same(x));
}

TEST(Dropout, Backward) {
  // dx = g · mask / (1 − p), the mask regenerated from the op's (seed, start).
  Tensor x = test_randn({4, 6}, 5).requires_grad_();
  Tensor g = test_randn({4, 6}, 6);
  Generator gen(11, 100);
  dropout(x, 0.25, gen).backward(g);
  std::vector<double> m = ref_mask(11, 100, 24, 0.25), gv = g.to_vector<double>(), want(24);
  for (int i = 0; i < 24; ++i) want[i] = gv[i] * m[i] / 0.75;
  EXPECT_TRUE(all_close(x.grad(), want, 1e-12));

  // Each evaluation copies the generator, so every call draws the same mask.
  const Generator base(21, 3);
  auto f = [base](const std::vector<Tensor>& in) {
    Generator gen_copy = base;
    return dropout(in[0], 0.4, gen_copy);
  };
  EXPECT_TRUE(gradcheck(f, {test_randn({3, 7}, 7)}));
  EXPECT_TRUE(gradcheck(f, {test_randn({2, 3, 5}, 8)}));
}

TEST(Dropout, Errors) {
  Tensor x = zeros({2, 3});
  for (double p : {1.0, -0.1, 1.5, std::nan("")}) {
    try {
      dropout(x, p);
      FAIL() << "expected ValueError for p = " << p;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("dropout"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(dropout(x, 1.0, false), ValueError);  // a bad p is reported in eval too
  try {
    dropout(zeros({2, 3}, DType::i32), 0.5);
    FAIL() << "expected DTypeError";
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("dropout"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("i32[2, 3]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
