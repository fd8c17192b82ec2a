// Element conversion between dtypes on CPU memory (used by cast, to_vector, from_vector).
#include <cstring>
#include <limits>

#include "core/half.h"
#include "core/tensor.h"

namespace tessera {
namespace {

template <class T> double load(const void* p, int64_t i) { return static_cast<double>(static_cast<const T*>(p)[i]); }
template <class T> void store(void* p, int64_t i, double v) { static_cast<T*>(p)[i] = static_cast<T>(v); }

// Float->integer conversion truncates toward zero and saturates at the type's range
// (a plain cast of an out-of-range value is undefined behaviour); NaN -> 0.
template <class I> void store_int(void* p, int64_t i, double v) {
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<I>::max());
  static_cast<I*>(p)[i] = v != v ? I(0) : v <= lo ? std::numeric_limits<I>::min()
                                   : v >= hi ? std::numeric_limits<I>::max() : static_cast<I>(v);
}

template <class Src, class Dst> void convert_typed(const void* src, void* dst, int64_t n) {
  const Src* s = static_cast<const Src*>(src);
  Dst* d = static_cast<Dst*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<Dst>(s[i]);
}

}  // namespace

void convert_elements(const void* src, DType st, void* dst, DType dt, int64_t n) {
  if (n <= 0) return;  // empty tensors may have null data pointers
  if (st == dt) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(st));
    return;
  }
  // Fast paths for the conversions training uses.
  if (st == DType::f32 && dt == DType::f64) return convert_typed<float, double>(src, dst, n);
  if (st == DType::f64 && dt == DType::f32) return convert_typed<double, float>(src, dst, n);
  if (st == DType::f32 && dt == DType::bf16) {
    auto* d = static_cast<uint16_t*>(dst);
    const auto* s = static_cast<const float*>(src);
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16_bits(s[i]);
    return;
  }
  if (st == DType::bf16 && dt == DType::f32) {
    auto* d = static_cast<float*>(dst);
    const auto* s = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_bits_to_float(s[i]);
    return;
  }
  if (st == DType::f32 && dt == DType::f16) {
    auto* d = static_cast<uint16_t*>(dst);
    const auto* s = static_cast<const float*>(src);
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_f16_bits(s[i]);
    return;
  }
  if (st == DType::f16 && dt == DType::f32) {
    auto* d = static_cast<float*>(dst);
    const auto* s = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) d[i] = f16_bits_to_float(s[i]);
    return;
  }
  // General path through double (exact for every source dtype). Half targets round
  // from f32, so f64 -> bf16 rounds twice; that matches casting through f32 on GPUs.
  for (int64_t i = 0; i < n; ++i) {
    double v = 0;
    switch (st) {
      case DType::f32: v = load<float>(src, i); break;
      case DType::f64: v = load<double>(src, i); break;
      case DType::bf16: v = bf16_bits_to_float(static_cast<const uint16_t*>(src)[i]); break;
      case DType::f16: v = f16_bits_to_float(static_cast<const uint16_t*>(src)[i]); break;
      case DType::i32: v = load<int32_t>(src, i); break;
      case DType::u8: v = load<uint8_t>(src, i); break;
    }
    switch (dt) {
      case DType::f32: store<float>(dst, i, v); break;
      case DType::f64: store<double>(dst, i, v); break;
      case DType::bf16: static_cast<uint16_t*>(dst)[i] = float_to_bf16_bits(static_cast<float>(v)); break;
      case DType::f16: static_cast<uint16_t*>(dst)[i] = float_to_f16_bits(static_cast<float>(v)); break;
      case DType::i32: store_int<int32_t>(dst, i, v); break;
      case DType::u8: store_int<uint8_t>(dst, i, v); break;
    }
  }
}

}  // namespace tessera
