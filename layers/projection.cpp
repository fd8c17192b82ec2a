#include "layers/projection.h"

#include "core/error.h"

namespace tessera {
namespace nn {

Projection::Projection(const ProjectionOptions& o, Generator& gen) {
  TS_CHECK(o.block_size() >= 0, ValueError,
           "Projection: block size must be 0 (dense) or a block size, got " << o.block_size());
  if (o.block_size() == 0) {
    dense_ = std::make_shared<Linear>(
        LinearOptions(o.in_features(), o.out_features()).bias(o.bias()).dtype(o.dtype()), gen);
  } else {
    sparse_ = std::make_shared<BlockSparseLinear>(
        BlockSparseLinearOptions(o.in_features(), o.out_features(), o.block_size())
            .density(o.density(), o.seed())
            .bias(o.bias())
            .dtype(o.dtype()),
        gen);
  }
}

Tensor Projection::forward(const Tensor& x) const {
  TS_CHECK(dense_ || sparse_, ValueError, "Projection: forward on an empty projection");
  return dense_ ? dense_->forward(x) : sparse_->forward(x);
}

std::shared_ptr<Module> Projection::module() const {
  if (dense_) return dense_;
  return sparse_;
}

}  // namespace nn
}  // namespace tessera
