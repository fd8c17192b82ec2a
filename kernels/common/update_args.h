// Argument checks and scalar reads shared by the fused optimizer update ops (sgd_update,
// adam_update): tensors (p, g, state...) of one floating meta, then lr [] and step [] in f64.
#pragma once

#include <initializer_list>
#include <vector>

#include "core/op.h"

namespace tessera {
namespace detail {

/// Checks in = (names[0], names[1], ..., lr, step): the named tensors all have names[0]'s
/// meta (floating), lr and step are 0-d f64. Errors name the op, the inputs and their metas.
inline void check_update_args(const char* op, const std::vector<TensorMeta>& in,
                              std::initializer_list<const char*> names) {
  const TensorMeta& p = in[0];
  check_floating(op, p, *names.begin());
  size_t i = 0;
  for (const char* name : names) {
    if (i > 0) {
      TS_CHECK(in[i].dtype == p.dtype, DTypeError,
               op << ": " << name << " " << in[i] << " does not match " << *names.begin() << " " << p);
      TS_CHECK(in[i].shape == p.shape, ShapeError,
               op << ": " << name << " " << in[i] << " does not match " << *names.begin() << " " << p);
    }
    ++i;
  }
  const char* scalars[] = {"lr", "step"};
  for (const char* name : scalars) {
    const TensorMeta& s = in[i++];
    TS_CHECK(s.dtype == DType::f64, DTypeError, op << ": " << name << " must be a 0-d f64 tensor, got " << s);
    TS_CHECK(s.shape.ndim() == 0, ShapeError, op << ": " << name << " must be a 0-d f64 tensor, got " << s);
  }
}

/// The value of a 0-d f64 tensor (lr, step) on the CPU.
inline double read_update_scalar(const Tensor& t) { return *t.data<double>(); }

}  // namespace detail
}  // namespace tessera
