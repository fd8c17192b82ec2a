#include "layers/dropout.h"

#include "kernels/ops.h"

namespace tessera {
namespace nn {

Dropout::Dropout(const DropoutOptions& options) : options_(options) {
  TS_CHECK(options.p() >= 0.0 && options.p() < 1.0, ValueError,
           "Dropout: p must be in [0, 1), got " << options.p());
}

Tensor Dropout::forward(const Tensor& x, Generator& gen) const {
  return dropout(x, options_.p(), gen, is_training());
}

}  // namespace nn
}  // namespace tessera
