// nn::BlockSparseLinear: y = x·W + b where W [in, out] stores only the bs×bs blocks of a
// BlockLayout (weight [nnz, bs, bs]), optionally with a per-block gate and per-output-column
// weight normalization.
//
//   Generator gen(0);
//   nn::BlockSparseLinear fc(nn::BlockSparseLinearOptions(1024, 1024, 32).density(0.1, /*seed=*/7), gen);
//   Tensor y = fc.forward(x);                       // x [N, 1024] -> y [N, 1024]
//   nn::BlockSparseLinear g(nn::BlockSparseLinearOptions(layout).gate(true).weight_norm(true)
//                               .init(nn::BlockSparseInit::orthogonal), gen);
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/random.h"
#include "core/sparse/block_layout.h"
#include "layers/module.h"

namespace tessera {
namespace nn {

/// How the stored blocks of the weight start out.
enum class BlockSparseInit {
  normal,      ///< N(0, std²); std = init_std(), or 1/sqrt(fan_in) when init_std() <= 0
  uniform,     ///< U(−1/sqrt(fan_in), 1/sqrt(fan_in)) for the weight and the bias: nn::Linear's rule
  orthogonal,  ///< each bs×bs block an orthogonal matrix (QR of a random normal matrix)
  identity,    ///< blocks on the diagonal (block row == block column) identity, all others zero
};

/// Options of BlockSparseLinear. The layout is either given (layout(l), or the constructor taking
/// one), or generated from in/out/block size: dense by default, random_layout(in, out, bs,
/// density, seed) after density(d, seed) with d < 1.
struct BlockSparseLinearOptions {
  BlockSparseLinearOptions(int64_t in_features, int64_t out_features, int64_t block_size = 32)
      : in_(in_features), out_(out_features), bs_(block_size) {}
  /// Sizes and block size taken from `layout`.
  explicit BlockSparseLinearOptions(const LayoutPtr& layout);

  BlockSparseLinearOptions& in(int64_t n) { in_ = n; return *this; }
  BlockSparseLinearOptions& out(int64_t n) { out_ = n; return *this; }
  BlockSparseLinearOptions& block_size(int64_t bs) { bs_ = bs; return *this; }
  BlockSparseLinearOptions& layout(LayoutPtr l) { layout_ = std::move(l); return *this; }
  /// Generate a random layout of this density (used only when no layout is given).
  BlockSparseLinearOptions& density(double d, uint64_t seed = 0) { density_ = d; seed_ = seed; return *this; }
  BlockSparseLinearOptions& bias(bool on) { bias_ = on; return *this; }
  BlockSparseLinearOptions& gate(bool on) { gate_ = on; return *this; }
  BlockSparseLinearOptions& weight_norm(bool on) { weight_norm_ = on; return *this; }
  BlockSparseLinearOptions& init(BlockSparseInit i) { init_ = i; return *this; }
  /// Standard deviation of the normal init; <= 0 (the default): 1/sqrt(fan_in).
  BlockSparseLinearOptions& init_std(double s) { init_std_ = s; return *this; }
  BlockSparseLinearOptions& dtype(DType t) { dtype_ = t; return *this; }

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  int64_t block_size() const { return bs_; }
  const LayoutPtr& layout() const { return layout_; }
  double density() const { return density_; }
  uint64_t seed() const { return seed_; }
  bool bias() const { return bias_; }
  bool gate() const { return gate_; }
  bool weight_norm() const { return weight_norm_; }
  BlockSparseInit init() const { return init_; }
  double init_std() const { return init_std_; }
  DType dtype() const { return dtype_; }

 private:
  int64_t in_, out_, bs_;
  LayoutPtr layout_;
  double density_ = 1.0;
  uint64_t seed_ = 0;
  bool bias_ = true, gate_ = false, weight_norm_ = false;
  BlockSparseInit init_ = BlockSparseInit::normal;
  double init_std_ = 0.0;
  DType dtype_ = DType::f32;
};

/// forward(x [..., in]) = bsmm(x, W, layout, gate) + bias -> [..., out] (the bias added in bsmm's epilogue).
/// fan_in, in the inits, is the inputs an output column reads on average: nnz·bs² / out.
///
/// Parameters: "weight" [nnz, bs, bs] (block k of the layout), "bias" [out] (zeros, or uniform
/// under BlockSparseInit::uniform; when bias()),
/// "gate" [nnz] (ones; when gate()), "gain" [out] (when weight_norm()). With weight norm the
/// stored weight is a direction V and each output column j of W is rescaled to norm gain[j]:
///   W[:, j] = gain[j] · V[:, j] / ||V[:, j]||,   norms over the stored blocks of column j only,
/// computed with ops, so gradients reach V and gain: ||V[:, j]||² = bsmm(1 [1, in], V ⊙ V)[j], and
/// the per-column factor s [out] is spread onto the blocks as bsmm_dw(1 [1, in], s) [nnz, bs, bs].
/// (Squared norms are floored at 1e-30, so columns without stored blocks stay finite.) gain starts
/// at the column norms of the initial V, so W = V at initialization (as PyTorch's weight_norm).
///
/// fan_in (for the default normal std) is the mean number of stored inputs per output feature,
/// nnz·bs²/out. num_parameters() counts stored blocks only.
class BlockSparseLinear : public Module {
 public:
  /// ValueError/ShapeError naming the bad option (sizes, block size, density, a layout whose
  /// sizes differ from in/out/block size).
  explicit BlockSparseLinear(const BlockSparseLinearOptions& options, Generator& gen = default_generator());

  /// x [..., in] -> [..., out]; ShapeError naming x and the layer's sizes when x's last dim is not in.
  Tensor forward(const Tensor& x) const;
  /// forward with y written in `out`: forward(x)'s dtype, or under autocast the autocast dtype
  /// (for a reader of the low dtype; see bsmm(..., out)).
  Tensor forward(const Tensor& x, DType out) const;

  /// The block weights the forward multiplies by: weight, or its weight-normalized version.
  Tensor effective_weight() const;

  const LayoutPtr& layout() const { return layout_; }
  /// Switches to another layout of the same sizes, block size and block count (dynamic sparsity:
  /// prune and regrow at a fixed budget of blocks). Stored block k of the weight, its gate and
  /// their optimizer state belong to the new layout's block k from now on; set their values as
  /// the method needs (e.g. zeros for regrown blocks). Compiled steps that ran this layer trace
  /// again at their next run (layout_generation()). ShapeError naming both layouts otherwise.
  void set_layout(LayoutPtr layout);
  /// {layout(), none}: what checkpoints save as this module's /layout/<path>.
  ModuleLayouts layouts() const override { return {layout_, nullptr}; }
  /// set_layout(layout): how a restore adopts a checkpoint's layout (adopt_layouts).
  void set_block_layout(LayoutPtr layout) override { set_layout(std::move(layout)); }
  const Tensor& weight() const { return weight_; }
  /// Undefined when the option is off.
  const Tensor& bias() const { return bias_; }
  const Tensor& gate() const { return gate_; }
  const Tensor& gain() const { return gain_; }
  const BlockSparseLinearOptions& options() const { return options_; }

 private:
  Tensor product(const Tensor& x, std::optional<DType> out) const;  // forward, forward(x, out)
  BlockSparseLinearOptions options_;
  LayoutPtr layout_;
  Tensor weight_, bias_, gate_, gain_;
};

// What the block-sparse layers (BlockSparseLinear, BlockSparseConv) share.
namespace block_sparse {

/// The floor under squared weight-norm norms (BlockSparseLinear's columns, BlockSparseConv's
/// channels): keeps rsqrt finite, and gradients free of 0·inf, where no block is stored.
constexpr double kWeightNormSqFloor = 1e-30;

/// The layout of a block-sparse layer `layer` over (in, out) features in blocks of bs: `given`
/// after checking its sizes (ShapeError naming the layer), else dense at density 1 and random at
/// density d < 1 (ValueError outside (0, 1]).
LayoutPtr layer_layout(const std::string& layer, const LayoutPtr& given, int64_t in, int64_t out, int64_t bs,
                       double density, uint64_t seed);

}  // namespace block_sparse

}  // namespace nn
}  // namespace tessera
