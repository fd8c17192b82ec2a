// nn::LSTMCell and nn::LSTM: dense or block-sparse LSTMs, optionally layer-normalized and/or
// multiplicative (mLSTM), with truncated backpropagation through time by carrying the state.
//
//   Generator gen(0);
//   nn::LSTM lstm(nn::LSTMOptions(64, 512).block_size(32).density(0.25, /*seed=*/7).multiplicative(true),
//                 gen);
//   nn::LSTMState state;                                    // undefined: zeros
//   for (const Batch& b : batches) {                        // x [T, B, 64], time-major
//     nn::LSTMOutput out = lstm.forward(b.x, state);        // out.output [T*B, 512]
//     loss_of(out.output).backward();
//     state = out.state.detach();                           // carry values, cut the graph
//   }
//
// One step, with x_t [B, In], h, c [B, H] and the four gates in the order (i, f, o, u):
//   r   = h                                     (plain LSTM)
//   r   = (x_t·Wmx) ⊙ (h·Wmh)                   (multiplicative: mLSTM, Krause et al. 2016)
//   pre = x_t·Wx + r·Wh + b                     (layer_norm off)
//   pre = LN(x_t·Wx)·gx + LN(r·Wh)·gh + b       (layer_norm on: Ba et al. 2016, input and
//                                                 recurrent parts normalized separately, each
//                                                 over all 4H gate pre-activations)
//   (h', c') = lstm_gates(pre, c, forget_bias)  i, f, o = σ(...), u = tanh(...),
//                                                 c' = f⊙c + i⊙u, h' = o⊙tanh(c')
// The input terms of all T steps are computed at once (one [T*B, In] product) and split per step;
// only the recurrent product runs step by step. On the GPU a plain LSTM (dense or block-sparse)
// runs the whole recurrence as one lstm_recurrence op instead: one persistent kernel for the T
// steps forward and one for backpropagation through time (kernels/lstm_recurrence).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/random.h"
#include "core/sparse/block_layout.h"
#include "layers/block_sparse_linear.h"
#include "layers/linear.h"
#include "layers/module.h"
#include "layers/projection.h"

namespace tessera {
namespace nn {

/// The layout of a gate-stacked weight [in, 4H] from a per-gate layout [in, H]: the per-gate
/// pattern repeated for the gates i, f, o, u along the output columns (what nn::LSTM's wx and wh
/// use, and what lstm_recurrence's forward kernel expects).
LayoutPtr lstm_gate_layout(const BlockLayout& per_gate);

/// The recurrent state: h and c, both [B, H]. A default-constructed state is undefined and
/// means zeros.
struct LSTMState {
  Tensor h, c;
  bool defined() const { return h.defined(); }
  /// The same values without autograd history (truncated BPTT: carry it to the next batch).
  LSTMState detach() const { return defined() ? LSTMState{h.detach(), c.detach()} : LSTMState{}; }
};

/// Options of LSTMCell / LSTM with chainable setters.
///
/// Block sparsity (block_size() > 0): the input weights Wx [In, 4H] and recurrent weights
/// Wh [H, 4H] are nn::BlockSparseLinear layers. Their layouts are given *per gate* — input
/// [In, H], recurrent [H, H] — and shared by the four gates (the per-gate pattern is tiled
/// along the 4H output columns: every gate of a hidden unit sees the same inputs). A per-gate
/// layout is input_layout()/recurrent_layout() when set, else a random layout of density()
/// (seed() for the input, seed() + 1 for the recurrent one), else dense (density 1). The mLSTM
/// weights Wmx [In, H] and Wmh [H, H] use the per-gate input and recurrent layouts as they are.
/// block_size() == 0 means dense nn::Linear weights (density must then be 1).
struct LSTMOptions {
  LSTMOptions(int64_t input_size, int64_t hidden_size) : in_(input_size), hidden_(hidden_size) {}
  LSTMOptions& input_size(int64_t n) { in_ = n; return *this; }
  LSTMOptions& hidden_size(int64_t n) { hidden_ = n; return *this; }
  /// Added to the forget gate's pre-activation (1.0: remember by default).
  LSTMOptions& forget_bias(double b) { forget_bias_ = b; return *this; }
  /// 0: dense weights; 8, 16, 32 or 64: block-sparse weights with that block size.
  LSTMOptions& block_size(int64_t bs) { bs_ = bs; return *this; }
  /// Density (0, 1] and seed of the random per-gate layouts (used where no layout is given).
  LSTMOptions& density(double d, uint64_t seed = 0) { density_ = d; seed_ = seed; return *this; }
  /// Per-gate layout of the input weights, [In, H] with block_size().
  LSTMOptions& input_layout(LayoutPtr l) { input_layout_ = std::move(l); return *this; }
  /// Per-gate layout of the recurrent weights, [H, H] with block_size().
  LSTMOptions& recurrent_layout(LayoutPtr l) { recurrent_layout_ = std::move(l); return *this; }
  LSTMOptions& layer_norm(bool on) { layer_norm_ = on; return *this; }
  LSTMOptions& multiplicative(bool on) { multiplicative_ = on; return *this; }
  /// > 0: LSTM::forward wraps each run of this many steps in graph::recompute (activation
  /// checkpointing in compiled steps; no effect in eager mode). 0: off.
  LSTMOptions& recompute_chunk(int64_t steps) { recompute_chunk_ = steps; return *this; }
  LSTMOptions& dtype(DType t) { dtype_ = t; return *this; }
  /// true: LSTM::forward runs the whole sequence as one cudnn_lstm op (cuDNN on the GPU, its
  /// reference kernel on the CPU) with the same parameters (so checkpoints are the same). Dense
  /// plain LSTMs only: ValueError with block_size > 0, layer_norm, multiplicative or
  /// recompute_chunk. LSTMCell's own forward/step do not change.
  LSTMOptions& cudnn(bool on) { cudnn_ = on; return *this; }
  /// true (the default): on the GPU, LSTM::forward runs a plain LSTM's recurrence as one
  /// lstm_recurrence op (persistent kernels) when the kernel takes the problem (see
  /// LSTMCell::fused_recurrence); false: step by step as on the CPU. Results agree to rounding.
  LSTMOptions& fuse(bool on) { fuse_ = on; return *this; }

  int64_t input_size() const { return in_; }
  int64_t hidden_size() const { return hidden_; }
  double forget_bias() const { return forget_bias_; }
  int64_t block_size() const { return bs_; }
  double density() const { return density_; }
  uint64_t seed() const { return seed_; }
  const LayoutPtr& input_layout() const { return input_layout_; }
  const LayoutPtr& recurrent_layout() const { return recurrent_layout_; }
  bool layer_norm() const { return layer_norm_; }
  bool multiplicative() const { return multiplicative_; }
  int64_t recompute_chunk() const { return recompute_chunk_; }
  DType dtype() const { return dtype_; }
  bool cudnn() const { return cudnn_; }
  bool fuse() const { return fuse_; }

 private:
  int64_t in_, hidden_;
  double forget_bias_ = 1.0;
  int64_t bs_ = 0;
  double density_ = 1.0;
  uint64_t seed_ = 0;
  LayoutPtr input_layout_, recurrent_layout_;
  bool layer_norm_ = false, multiplicative_ = false;
  int64_t recompute_chunk_ = 0;
  DType dtype_ = DType::f32;
  bool cudnn_ = false;
  bool fuse_ = true;
};

/// One LSTM step. Submodules "wx" (Wx [In, 4H], no bias), "wh" (Wh [H, 4H], no bias) and, for
/// mLSTM, "wmx" (Wmx [In, H]) and "wmh" (Wmh [H, H]): nn::Linear or nn::BlockSparseLinear.
/// Parameters "bias" [4H] (zeros) and, with layer_norm, "gamma_x" and "gamma_h" [4H] (ones).
class LSTMCell : public Module {
 public:
  /// ValueError/ShapeError naming the bad option (sizes, block size, density, layout shapes).
  explicit LSTMCell(const LSTMOptions& options, Generator& gen = default_generator());

  /// x [B, In], state {h, c} [B, H] (undefined: zeros) -> the new state.
  LSTMState forward(const Tensor& x, const LSTMState& state = {}) const;

  /// The input-dependent terms for many rows at once, x [N, In] -> gates [N, 4H] (input term
  /// of pre, bias included) and, for mLSTM, m [N, H] = x·Wmx (undefined otherwise).
  struct InputTerms {
    Tensor gates, m;
  };
  InputTerms input_terms(const Tensor& x) const;
  /// The rest of one step from its rows of input_terms (gates [B, 4H], m [B, H] or undefined)
  /// and a defined state.
  LSTMState step(const Tensor& gates_x, const Tensor& m_x, const LSTMState& state) const;
  /// Zeros [B, H] (a traceable fill op) of `dtype` on `device`.
  LSTMState zero_state(int64_t batch, DType dtype, Device device = Device::cpu()) const;

  const LSTMOptions& options() const { return options_; }
  /// The per-gate layouts in use (null when dense).
  const LayoutPtr& input_layout() const { return input_layout_; }
  const LayoutPtr& recurrent_layout() const { return recurrent_layout_; }
  /// The layout of the recurrent weight W_h [H, 4H] (the per-gate layout tiled over the four
  /// gates; null when dense): what lstm_recurrence takes.
  LayoutPtr recurrent_weight_layout() const { return wh_.sparse() ? wh_.sparse()->layout() : nullptr; }
  /// Whether LSTM::forward runs the recurrence of x (`steps` steps of `batch` rows) as one
  /// lstm_recurrence op: a plain LSTM (not mLSTM, no layer norm, no recompute, not cudnn(),
  /// fuse() on) on a CUDA device whose problem the persistent kernel takes
  /// (lstm_recurrence_fused), unless the environment sets TESSERA_LSTM_FUSED=0. The CPU always
  /// runs step by step.
  bool fused_recurrence(const Tensor& x, int64_t steps, int64_t batch) const;

 protected:
  /// ShapeError naming `who` unless the state is undefined or {h, c} are both [batch, H].
  void check_state(const char* who, const LSTMState& s, int64_t batch) const;
  /// The sequence x [T, B, In] from a defined state as one cudnn_lstm op (options().cudnn()):
  /// every step's h, y [T, B, H], and the final state.
  std::pair<Tensor, LSTMState> cudnn_sequence(const Tensor& x, const LSTMState& s) const;
  /// The recurrence from the input products x·W_x [T, B, 4H] and a defined state as one
  /// lstm_recurrence op, which adds the bias itself: every step's h, y [T, B, H], and the final
  /// state.
  /// With `paired` operands (paired_input_operands) the op's backward also gives W_x its gradient.
  struct InputOperands {
    Tensor x, wx;  ///< x [N, In] and W_x's blocks as the product reads them (cast under autocast)
  };
  std::pair<Tensor, LSTMState> fused_sequence(const Tensor& product_x, const LSTMState& s,
                                              const InputOperands& paired = {}) const;
  /// The input products x [N, In] -> x·W_x [N, 4H] (no bias) for the fused recurrence: under
  /// autocast written in the autocast dtype, which the recurrence reads (the product's operands
  /// cast here, as the product would cast them), instead of f32 that the recurrence would cast.
  /// With `paired` operands, bsmm of them with W_x detached: its gradient comes from the recurrence.
  Tensor fused_input_product(const Tensor& x, const InputOperands& paired = {}) const;
  /// W_x's gradient in one launch with W_h's (bsmm_dw_pair: the gates' gradient read once): the
  /// product's operands where both weights are block-sparse, W_x ungated, and bsmm_dw_pair_fused
  /// takes the problem (x [N, In], batch rows a step); else none (W_x's from the product's backward).
  InputOperands paired_input_operands(const Tensor& x, int64_t batch) const;

 private:
  // The weight `name` [in, out] without bias, registered as a submodule: dense (layout null) or
  // block-sparse with `layout`.
  Projection make_weight(const std::string& name, int64_t in, int64_t out, const LayoutPtr& layout,
                         Generator& gen);

  LSTMOptions options_;
  LayoutPtr input_layout_, recurrent_layout_;
  Projection wx_, wh_, wmx_, wmh_;
  Tensor bias_, gamma_x_, gamma_h_;
};

/// What LSTM::forward returns: every step's h concatenated, output [T*B, H] (row t*B + b is step
/// t, batch row b), the same as a vector of T tensors [B, H] (left empty with cudnn() and on the
/// GPU's fused recurrence: the op makes output in one piece, and splitting it would copy it), and
/// the final state.
struct LSTMOutput {
  Tensor output;
  std::vector<Tensor> steps;
  LSTMState state;
};

/// An LSTMCell run over a time-major sequence (same parameters and paths as the cell).
class LSTM : public LSTMCell {
 public:
  using LSTMCell::LSTMCell;

  /// x [T, B, In], or [T*B, In] with B taken from the state (when defined) or from `batch`;
  /// state undefined: zeros. ShapeError/ValueError naming the shapes when they do not fit.
  LSTMOutput forward(const Tensor& x, const LSTMState& state = {}, int64_t batch = 0) const;
};

}  // namespace nn
}  // namespace tessera
