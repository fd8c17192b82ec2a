#include "core/autocast.h"

#include <unordered_map>

#include "core/error.h"

namespace tessera {
namespace autocast {

namespace {

struct State {
  DType dtype = DType::f32;
  int depth = 0;  // live guards that switched autocast on
  // Casts of parameters made inside the outermost guard: key = the parameter's storage object.
  // Holding the parameter too keeps the key alive and unique while the entry exists.
  struct Entry {
    Tensor param, cast;
  };
  std::unordered_map<const TensorImpl*, Entry> cache;
};

thread_local State g_state;

}  // namespace

DType dtype() { return g_state.dtype; }

Guard::Guard(DType dtype) : prev_(g_state.dtype) {
  TS_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, ValueError,
           "autocast::Guard: dtype must be bf16 or f16 (on) or f32 (off), got " << dtype_name(dtype));
  g_state.dtype = dtype;
  ++g_state.depth;
}

Guard::~Guard() {
  g_state.dtype = prev_;
  if (--g_state.depth == 0) g_state.cache.clear();
}

bool applies(std::initializer_list<const Tensor*> inputs) {
  if (!enabled()) return false;
  bool any_f32 = false;
  for (const Tensor* t : inputs) {
    if (!t->defined()) continue;
    if (t->dtype() != DType::f32 && t->dtype() != g_state.dtype) return false;
    any_f32 |= t->dtype() == DType::f32;
  }
  return any_f32;
}

DType operand_dtype(const Tensor& x) { return enabled() && x.dtype() == DType::f32 ? g_state.dtype : x.dtype(); }

namespace detail {

const Tensor* cached_cast(const Tensor& param) {
  auto it = g_state.cache.find(param.impl());
  return it != g_state.cache.end() && it->second.cast.dtype() == g_state.dtype ? &it->second.cast : nullptr;
}

void cache_cast(const Tensor& param, const Tensor& cast) { g_state.cache[param.impl()] = State::Entry{param, cast}; }

}  // namespace detail

}  // namespace autocast
}  // namespace tessera
