// Shape rule shared by elementwise unary ops on floating tensors.
#pragma once

#include <vector>

#include "core/op.h"

namespace tessera {

/// One floating input; the output has its shape, dtype and device.
inline std::vector<TensorMeta> infer_unary_floating(const char* op, const std::vector<TensorMeta>& in) {
  check_num_inputs(op, in, 1);
  check_floating(op, in[0]);
  return {in[0]};
}

}  // namespace tessera
