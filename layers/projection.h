// nn::Projection: a linear map that is dense (nn::Linear) or block-sparse (nn::BlockSparseLinear)
// by its options, behind one forward: the linear maps of attention and MLP blocks and the
// LSTM's weights.
//
//   nn::Projection fc(nn::ProjectionOptions(256, 1024).block_size(32).density(0.25, /*seed=*/3), gen);
//   register_module("fc", fc.module());   // parameters "fc.weight", "fc.bias" as with the layer itself
//   Tensor y = fc.forward(x);              // x [N, 256] -> [N, 1024]
//   nn::Projection w(nn::ProjectionOptions(256, 1024).layout(my_layout).bias(false), gen);  // a given layout
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "layers/block_sparse_linear.h"
#include "layers/linear.h"

namespace tessera {
namespace nn {

/// Options of a Projection: sizes, block size (0 = dense Linear), density and layout seed of the
/// block-sparse layout, or a given layout; bias, parameter dtype.
struct ProjectionOptions {
  ProjectionOptions(int64_t in_features, int64_t out_features) : in_(in_features), out_(out_features) {}
  ProjectionOptions& block_size(int64_t bs) { bs_ = bs; return *this; }
  ProjectionOptions& density(double d, uint64_t seed = 0) { density_ = d; seed_ = seed; return *this; }
  /// A given block layout [in, out] instead of a random one (block-sparse with its block size;
  /// block_size() must then be 0 or the layout's, density() 1). Null: none.
  ProjectionOptions& layout(LayoutPtr l) { layout_ = std::move(l); return *this; }
  ProjectionOptions& bias(bool on) { bias_ = on; return *this; }
  ProjectionOptions& dtype(DType t) { dtype_ = t; return *this; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  int64_t block_size() const { return bs_; }
  double density() const { return density_; }
  uint64_t seed() const { return seed_; }
  const LayoutPtr& layout() const { return layout_; }
  bool bias() const { return bias_; }
  DType dtype() const { return dtype_; }

 private:
  int64_t in_, out_, bs_ = 0;
  double density_ = 1.0;
  uint64_t seed_ = 0;
  LayoutPtr layout_;
  bool bias_ = true;
  DType dtype_ = DType::f32;
};

/// Not a Module itself: it owns one layer (BlockSparseLinear with the given layout when there is
/// one, else Linear when block_size() == 0, else BlockSparseLinear with a random layout of the
/// given density and seed), which the owner registers under its name. Both kinds start by
/// nn::Linear's rule, weight and bias U(±1/sqrt(fan_in)) over the inputs an output reads (the
/// block-sparse one with BlockSparseInit::uniform), so that dense and sparse start alike.
class Projection {
 public:
  Projection() = default;
  Projection(const ProjectionOptions& options, Generator& gen);

  /// x [..., in] -> [..., out].
  Tensor forward(const Tensor& x) const;
  /// forward with y written in `out`: forward(x)'s dtype, or under autocast the autocast dtype,
  /// rounded once from the f32 sums plus the f32 bias (for a reader of the low dtype, as
  /// attention's q, k, v: no f32 tensor and no cast pass, forward or backward).
  Tensor forward(const Tensor& x, DType out) const;
  /// The layer, to register in the owning module.
  std::shared_ptr<Module> module() const;
  /// Null unless dense / block-sparse respectively.
  const std::shared_ptr<Linear>& dense() const { return dense_; }
  const std::shared_ptr<BlockSparseLinear>& sparse() const { return sparse_; }

 private:
  std::shared_ptr<Linear> dense_;
  std::shared_ptr<BlockSparseLinear> sparse_;
};

}  // namespace nn
}  // namespace tessera
