// Vectorized access for flat elementwise kernels: N consecutive elements moved as one aligned
// 8- or 16-byte load/store (Pack<T, N>), so a warp's loads are full 128-byte transactions.
//
//   if (cuda::packable<4>(x, y)) { ... reinterpret_cast<const Pack<T, 4>*>(x)[v] ... }
//
// Callers take the packed path only when every pointer is aligned to its pack (views into a
// buffer may start anywhere) and handle the last n % N elements one by one.
#pragma once

#include <cstdint>

namespace tessera {
namespace cuda {

/// N elements of T as one aligned unit.
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

/// Whether every pointer is aligned for Pack<·, N> of its own element type.
template <int N, class... Ptrs>
bool packable(const Ptrs*... ptrs) {
  return ((reinterpret_cast<uintptr_t>(ptrs) % (sizeof(Ptrs) * N) == 0) && ...);
}

/// Elements per pack: 16 bytes of f32 (4) or f64 (2); 4 of the 16-bit types (8 bytes: their
/// f32 math per element, not the load width, is then the limit).
template <class T>
constexpr int pack_width() {
  return sizeof(T) == 8 ? 2 : 4;
}

}  // namespace cuda
}  // namespace tessera
