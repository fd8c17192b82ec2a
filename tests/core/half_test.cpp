#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/half.h"
#include "core/tensor.h"

namespace tessera {
namespace {

TEST(Half, Bf16RoundTripsEveryBitPatternThroughF32) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    float f = bf16_bits_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(f))));
      continue;
    }
    ASSERT_EQ(float_to_bf16_bits(f), h) << "bf16 bits " << h;
  }
}

TEST(Half, F16RoundTripsEveryBitPatternThroughF32) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    float f = f16_bits_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_bits_to_float(float_to_f16_bits(f))));
      continue;
    }
    ASSERT_EQ(float_to_f16_bits(f), h) << "f16 bits " << h;
  }
}

TEST(Half, KnownValues) {
  EXPECT_EQ(float_to_f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_f16_bits(65504.0f), 0x7bff);       // largest finite f16
  EXPECT_EQ(float_to_f16_bits(65520.0f), 0x7c00);       // rounds up to inf
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -26)), 0x0000);  // below half of it: zero
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(f16_bits_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(bf16_bits_to_float(0x4049), 3.140625f);
}

TEST(Half, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between f16 1.0 and 1 + 2^-10: ties go to the even mantissa (1.0).
  EXPECT_EQ(float_to_f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even): goes up.
  EXPECT_EQ(float_to_f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // bf16: 1 + 2^-8 is halfway between 1.0 and 1 + 2^-7.
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
}

TEST(Half, TensorsConvertThroughCastsOnCreation) {
  Tensor t = tensor({1.0, 0.1, -3.5, 1e6}, TensorOptions(DType::bf16));
  EXPECT_EQ(t.dtype(), DType::bf16);
  EXPECT_EQ(t.nbytes(), 8u);
  std::vector<float> v = t.to_vector<float>();
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], bf16_bits_to_float(float_to_bf16_bits(0.1f)));
  EXPECT_EQ(v[2], -3.5f);
  Tensor h = tensor({1e6, 0.5}, TensorOptions(DType::f16));
  EXPECT_TRUE(std::isinf(h.to_vector<float>()[0]));
  EXPECT_EQ(h.to_vector<float>()[1], 0.5f);
}

}  // namespace
}  // namespace tessera
