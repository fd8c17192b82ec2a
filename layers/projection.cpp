#include "layers/projection.h"

#include "core/error.h"

namespace tessera {
namespace nn {

// The block-sparse weights drawn by nn::Linear's rule, U(±1/sqrt(fan_in)) for weight and bias, with
// fan_in the inputs an output reads (in·density): a dense and a sparse projection then start with
// the same variance per output, so comparing them compares layouts, not inits.
constexpr BlockSparseInit kInit = BlockSparseInit::uniform;

Projection::Projection(const ProjectionOptions& o, Generator& gen) {
  TS_CHECK(o.block_size() >= 0, ValueError,
           "Projection: block size must be 0 (dense) or a block size, got " << o.block_size());
  if (const LayoutPtr& l = o.layout()) {
    TS_CHECK(l->in_features() == o.in_features() && l->out_features() == o.out_features(), ShapeError,
             "Projection: layout " << l->str() << " must be [" << o.in_features() << ", " << o.out_features() << "]");
    TS_CHECK((o.block_size() == 0 || o.block_size() == l->block_size()) && o.density() == 1, ValueError,
             "Projection: with a given layout " << l->str() << ", block size " << o.block_size() << " and density "
                                                << o.density() << " must be left unset (or match it)");
    sparse_ = std::make_shared<BlockSparseLinear>(
        BlockSparseLinearOptions(l).bias(o.bias()).init(kInit).dtype(o.dtype()), gen);
  } else if (o.block_size() == 0) {
    dense_ = std::make_shared<Linear>(
        LinearOptions(o.in_features(), o.out_features()).bias(o.bias()).dtype(o.dtype()), gen);
  } else {
    sparse_ = std::make_shared<BlockSparseLinear>(
        BlockSparseLinearOptions(o.in_features(), o.out_features(), o.block_size())
            .density(o.density(), o.seed())
            .bias(o.bias())
            .init(kInit)
            .dtype(o.dtype()),
        gen);
  }
}

Tensor Projection::forward(const Tensor& x) const {
  TS_CHECK(dense_ || sparse_, ValueError, "Projection: forward on an empty projection");
  return dense_ ? dense_->forward(x) : sparse_->forward(x);
}

Tensor Projection::forward(const Tensor& x, DType out) const {
  TS_CHECK(dense_ || sparse_, ValueError, "Projection: forward on an empty projection");
  return dense_ ? dense_->forward(x, out) : sparse_->forward(x, out);
}

std::shared_ptr<Module> Projection::module() const {
  if (dense_) return dense_;
  return sparse_;
}

}  // namespace nn
}  // namespace tessera
