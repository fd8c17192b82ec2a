// 16-bit float storage types and their conversions to and from f32.
//
// bf16: 1 sign, 8 exponent, 7 mantissa bits (the top half of an f32).
// f16 : IEEE 754 binary16, 1 sign, 5 exponent, 10 mantissa bits, with subnormals.
// Both round to nearest, ties to even; NaN stays NaN, overflow goes to +-inf (f16).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tessera {

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

/// f32 -> bf16 bits, round to nearest even.
inline uint16_t float_to_bf16_bits(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

/// bf16 bits -> f32 (exact).
inline float bf16_bits_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

/// f32 -> f16 bits, round to nearest even, subnormals kept.
inline uint16_t float_to_f16_bits(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
  int e = static_cast<int>(exp) - 127 + 15;  // f16 biased exponent
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
    // Subnormal: value = mant24 * 2^(exp-150) = m * 2^-24  =>  m = mant24 >> (14 - e).
    mant |= 0x800000u;
    int shift = 14 - e;
    uint32_t m = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (m & 1u))) ++m;  // may carry into the smallest normal: still right
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t h = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry may reach inf: still right
  return static_cast<uint16_t>(h);
}

/// f16 bits -> f32 (exact).
inline float f16_bits_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

/// bf16 storage type (what a bf16 tensor's data<bfloat16>() points to).
struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(float f) : bits(float_to_bf16_bits(f)) {}
  explicit operator float() const { return bf16_bits_to_float(bits); }
};

/// f16 storage type.
struct float16 {
  uint16_t bits = 0;
  float16() = default;
  explicit float16(float f) : bits(float_to_f16_bits(f)) {}
  explicit operator float() const { return f16_bits_to_float(bits); }
};

}  // namespace tessera
