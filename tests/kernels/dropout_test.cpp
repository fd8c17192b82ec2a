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

// ---- the optional Philox-base input (compiled steps feed it; see OpBase::kRandom) ----

Tensor drop(const Tensor& x, double p, uint64_t seed, uint64_t start, const Tensor& base = Tensor()) {
  return base.defined() ? call<op::Dropout>({p, seed, start}, {x, base})[0] : call<op::Dropout>({p, seed, start}, {x})[0];
}

TEST(Dropout, PhiloxBaseAddsToStart) {
  // first = start + base (mod 2^64): the same values as the attribute-only form with that start,
  // bases across the 32-bit word boundary and past 2^64 included.
  const uint64_t kLow32 = 0xFFFFFFFFull;
  struct Case {
    uint64_t start, base;
  };
  for (DType dt : {DType::f32, DType::f64, DType::bf16})
    for (const Case c : {Case{0, 0}, Case{7, 5}, Case{0, kLow32}, Case{3, kLow32 - 1}, Case{1, (uint64_t{5} << 32) + 9},
                         Case{~uint64_t{0} - 1, 4}}) {
      const Tensor x = cast(test_randn({5, 21}, 12, DType::f64), dt);
      const Tensor b = philox_base(c.base);
      EXPECT_EQ(b.dtype(), DType::i32);
      EXPECT_EQ(b.shape(), (Shape{2}));
      const Tensor got = drop(x, 0.35, 99, c.start, b), want = drop(x, 0.35, 99, c.start + c.base);
      EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>()) << dt << " start " << c.start << " base " << c.base;
    }
  // The base is data: the same op instance draws another mask when the base's contents change.
  const Tensor x = test_randn({4, 9}, 13);
  Tensor b = philox_base(10);
  const Tensor first = drop(x, 0.5, 3, 2, b);
  b.data<int32_t>()[0] = 30;
  EXPECT_EQ(drop(x, 0.5, 3, 2, b).to_vector<double>(), drop(x, 0.5, 3, 32).to_vector<double>());
  EXPECT_NE(drop(x, 0.5, 3, 2, b).to_vector<double>(), first.to_vector<double>());
  // And the generator-driven public function is the attribute-only form.
  Generator gen(3, 12);
  EXPECT_EQ(dropout(x, 0.5, gen).to_vector<double>(), first.to_vector<double>());
}

TEST(Dropout, PhiloxBaseBackwardRedrawsTheMask) {
  // dx = g · mask(start + base) / (1 − p); no gradient for the base.
  const Tensor x = test_randn({3, 10}, 14).requires_grad_(), g = test_randn({3, 10}, 15);
  const Tensor b = philox_base((uint64_t{1} << 32) + 40);
  drop(x, 0.4, 17, 2, b).backward(g);
  std::vector<double> m = ref_mask(17, (uint64_t{1} << 32) + 42, 30, 0.4), gv = g.to_vector<double>(), want(30);
  for (int i = 0; i < 30; ++i) want[i] = gv[i] * m[i] / 0.6;
  EXPECT_TRUE(all_close(x.grad(), want, 1e-12));
  auto f = [b](const std::vector<Tensor>& in) { return drop(in[0], 0.4, 17, 2, b); };
  EXPECT_TRUE(gradcheck(f, {test_randn({3, 7}, 16)}));
}

TEST(Dropout, PhiloxBaseErrors) {
  const Tensor x = test_randn({2, 3}, 17);
  testing::expect_error<DTypeError>([&] { drop(x, 0.5, 1, 0, zeros({2}, DType::f32)); },
                                    {"dropout", "Philox base", "i32[2]", "f32[2]"});
  testing::expect_error<ShapeError>([&] { drop(x, 0.5, 1, 0, zeros({1}, DType::i32)); },
                                    {"dropout", "Philox base", "i32[1]"});
  testing::expect_error<ShapeError>([&] { drop(x, 0.5, 1, 0, zeros({1, 2}, DType::i32)); }, {"dropout", "i32[1, 2]"});
  testing::expect_error<ValueError>([&] { call<op::Dropout>({0.5, 1, 0}, {x, philox_base(0), philox_base(0)}); },
                                    {"dropout", "1 or 2 inputs", "got 3"});
  // On another device than x: refused by the op machinery, and by the shape rule itself.
  const TensorMeta on_gpu{Shape{2}, DType::i32, Device::cuda(0)};
  testing::expect_error<DeviceError>([&] { drop(x, 0.5, 1, 0, symbolic({2}, DType::i32, Device::cuda(0))); },
                                     {"dropout", "cuda:0"});
  testing::expect_error<DeviceError>([&] { op::Dropout::infer({x.meta(), on_gpu}, {0.5, 1, 0}); },
                                     {"dropout", "Philox base", "cuda:0", "x's device"});
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
