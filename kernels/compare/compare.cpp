#include "kernels/compare/compare.h"

#include <functional>
#include <type_traits>

#include "kernels/common/elementwise.h"

namespace tessera {

// clang-format off
Tensor eq(const Tensor& a, const Tensor& b) { return call<op::Compare>({CompareMode::eq, {}}, {a, b})[0]; }
Tensor ne(const Tensor& a, const Tensor& b) { return call<op::Compare>({CompareMode::ne, {}}, {a, b})[0]; }
Tensor lt(const Tensor& a, const Tensor& b) { return call<op::Compare>({CompareMode::lt, {}}, {a, b})[0]; }
Tensor le(const Tensor& a, const Tensor& b) { return call<op::Compare>({CompareMode::le, {}}, {a, b})[0]; }
Tensor gt(const Tensor& a, const Tensor& b) { return call<op::Compare>({CompareMode::gt, {}}, {a, b})[0]; }
Tensor ge(const Tensor& a, const Tensor& b) { return call<op::Compare>({CompareMode::ge, {}}, {a, b})[0]; }
Tensor eq(const Tensor& x, double s) { return call<op::Compare>({CompareMode::eq, s}, {x})[0]; }
Tensor ne(const Tensor& x, double s) { return call<op::Compare>({CompareMode::ne, s}, {x})[0]; }
Tensor lt(const Tensor& x, double s) { return call<op::Compare>({CompareMode::lt, s}, {x})[0]; }
Tensor le(const Tensor& x, double s) { return call<op::Compare>({CompareMode::le, s}, {x})[0]; }
Tensor gt(const Tensor& x, double s) { return call<op::Compare>({CompareMode::gt, s}, {x})[0]; }
Tensor ge(const Tensor& x, double s) { return call<op::Compare>({CompareMode::ge, s}, {x})[0]; }
// clang-format on

const char* compare_mode_name(CompareMode mode) {
  switch (mode) {
    case CompareMode::eq: return "eq";
    case CompareMode::ne: return "ne";
    case CompareMode::lt: return "lt";
    case CompareMode::le: return "le";
    case CompareMode::gt: return "gt";
    case CompareMode::ge: return "ge";
  }
  return "?";
}

std::vector<TensorMeta> op::Compare::infer(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  TS_CHECK(static_cast<int>(attrs.mode) >= 0 && static_cast<int>(attrs.mode) <= static_cast<int>(CompareMode::ge),
           ValueError, "compare: unknown mode " << static_cast<int>(attrs.mode));
  const char* mode = compare_mode_name(attrs.mode);
  if (attrs.scalar) {
    TS_CHECK(in.size() == 1, ValueError,
             "compare (" << mode << "): with a scalar, expected 1 input, got " << in.size());
    return {TensorMeta{in[0].shape, DType::u8, in[0].device}};
  }
  TS_CHECK(in.size() == 2, ValueError, "compare (" << mode << "): expected 2 inputs, got " << in.size());
  TS_CHECK(in[0].dtype == in[1].dtype, DTypeError,
           "compare (" << mode << "): dtypes differ: " << in[0] << " and " << in[1]);
  return {TensorMeta{broadcast_shapes(in[0].shape, in[1].shape, "compare"), DType::u8, in[0].device}};
}

namespace {

// Runs cmp over the inputs of one element type T into the u8 output.
template <class T, class Cmp>
void compare_typed(const std::vector<Tensor>& in, const Tensor& out, const std::optional<double>& scalar, Cmp cmp) {
  if (scalar) {
    // Floating tensors meet the scalar rounded to their type (x == 0.1 is true for x = 0.1f);
    // integer tensors compare in double so that, e.g., x < 0.5 keeps its meaning.
    using C = std::conditional_t<std::is_floating_point<T>::value, T, double>;
    const C s = static_cast<C>(*scalar);
    cpu::unary_map<T, uint8_t>(in[0], out, [=](T x) { return static_cast<uint8_t>(cmp(static_cast<C>(x), s)); });
  } else {
    cpu::binary_map<T, uint8_t>(in[0], in[1], out, [=](T a, T b) { return static_cast<uint8_t>(cmp(a, b)); });
  }
}

}  // namespace

void op::Compare::cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& attrs) {
  // bf16/f16 inputs arrive widened to f32 (exact), so the kernel sees f32, f64, i32 or u8.
  dispatch_numeric(in[0].dtype(), kName, [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (attrs.mode) {
      case CompareMode::eq: return compare_typed<T>(in, out[0], attrs.scalar, std::equal_to<>());
      case CompareMode::ne: return compare_typed<T>(in, out[0], attrs.scalar, std::not_equal_to<>());
      case CompareMode::lt: return compare_typed<T>(in, out[0], attrs.scalar, std::less<>());
      case CompareMode::le: return compare_typed<T>(in, out[0], attrs.scalar, std::less_equal<>());
      case CompareMode::gt: return compare_typed<T>(in, out[0], attrs.scalar, std::greater<>());
      case CompareMode::ge: return compare_typed<T>(in, out[0], attrs.scalar, std::greater_equal<>());
    }
  });
}

}  // namespace tessera
