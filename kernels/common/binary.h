// Shape rule and gradient helper shared by broadcasting binary ops (add, sub, mul, div, ...).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tessera {

/// Two floating inputs of one dtype and device; output has their broadcast shape.
std::vector<TensorMeta> infer_broadcast_binary(const char* op, const std::vector<TensorMeta>& in);

/// Sums `g` down to `shape` (the inverse of broadcasting `shape` up to g's shape):
/// the gradient of a broadcast input. Returns g itself when the shapes already match.
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace tessera
