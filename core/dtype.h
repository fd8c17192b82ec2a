// Element types of tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

namespace tessera {

/// Element type. f32/f64 compute everywhere (f64 on CPU, for gradient checks);
/// bf16/f16 are stored on CPU and computed in f32 there; i32/u8 hold indices and masks.
enum class DType : uint8_t { f32, f64, bf16, f16, i32, u8 };

/// Bytes per element.
size_t dtype_size(DType t);
/// Short name: "f32", "bf16", ...
const char* dtype_name(DType t);
/// Parses a name from dtype_name(); throws ValueError on anything else.
DType dtype_from_name(const std::string& name);
/// f32, f64, bf16, f16.
bool is_floating(DType t);
/// bf16 or f16.
bool is_half(DType t);

std::ostream& operator<<(std::ostream& os, DType t);

/// C++ type -> DType, for the typed accessors (data<T>(), from_vector<T>).
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };

}  // namespace tessera
