// Two block-sparse weight gradients of one dY in one op: nn::LSTM's input and recurrent weights,
// whose gradients both read the gate pre-activations' gradient dpre [T·B, 4H] (1 GB at sparse
// H 8192, B 64, T 256). On the GPU one launch of the gate-run dW kernel takes both layouts' blocks
// of each gate-0 column in one run, so dpre is read once and a column's short lists fill one run
// (kernels/common/cuda/bsmm_sm90_gate_gradient.cu); elsewhere two bsmm_dw.
#pragma once

#include <tuple>
#include <utility>

#include "core/op.h"
#include "core/sparse/block_layout.h"

namespace tessera {

/// {dW_a, dW_b} with, for the blocks k of layout_a and of layout_b (r, c their block row and column),
///   dW_a[k] = Σ_{t < n} X_a[t, r-block]ᵀ·dY[t, c-block]
///   dW_b[k] = Σ_{shift ≤ t < n} X_b[t − shift, r-block]ᵀ·dY[t, c-block]
/// x_a [n, C_a], x_b [n − shift, C_b], dy [n, K], both layouts [·, K] of one block size; in x_a's
/// dtype, or f32 from bf16/f16 inputs with f32_output (the f32 sums as they are, as bsmm_dw's).
/// For nn::LSTM: x_a the inputs, x_b = y's first T−1 steps, shift B (h_{t−1} = y_{t−1}); the h0
/// term of dW_b is bsmm_dw's accumulate form afterwards.
std::pair<Tensor, Tensor> bsmm_dw_pair(const Tensor& x_a, const Tensor& x_b, const Tensor& dy,
                                       const LayoutPtr& layout_a, const LayoutPtr& layout_b, int64_t shift,
                                       bool f32_output = false);

/// The same and s [K] = Σ_t dY[t, :] over all n rows (f32, f64 for f64 dY): nn::LSTM's bias
/// gradient from the same read of dpre. On the GPU the pair's kernel sums the columns where it
/// can (each gate-0 column with a run; TESSERA_BSMM_DW_PAIR_SUMS=0, the lab's, never), else
/// col_sum's kernel; col_sum's on the CPU (summed in f64).
std::tuple<Tensor, Tensor, Tensor> bsmm_dw_pair_and_column_sums(const Tensor& x_a, const Tensor& x_b, const Tensor& dy,
                                                                const LayoutPtr& layout_a, const LayoutPtr& layout_b,
                                                                int64_t shift, bool f32_output = false);

/// Whether bsmm_dw_pair runs as one kernel launch for these operands (CUDA builds with the sm_90a
/// kernels, on an H100/H200: bf16/f16, both layouts nn::LSTM gate layouts of blocks of 32, the
/// same q, neither on bsmm_dw's dense route, pairing saves at least 1/16 of two launches' runs, and
/// TESSERA_BSMM_DW_PAIR not 0): what nn::LSTM asks before it routes W_x's gradient through
/// lstm_recurrence. False on the CPU.
bool bsmm_dw_pair_fused(const TensorMeta& x_a, const TensorMeta& x_b, const TensorMeta& dy,
                        const LayoutPtr& layout_a, const LayoutPtr& layout_b, int64_t shift);

namespace op {
/// Inputs x_a [n, C_a], x_b [n − shift, C_b], dy [n, K]; attrs layout_a, layout_b, shift ≥ 0,
/// f32_output, column_sums. Outputs dW_a [nnz_a, bs, bs], dW_b [nnz_b, bs, bs] as above, in the
/// inputs' dtype (f32 with f32_output, bf16/f16 inputs only); with column_sums a third, s [K] as
/// col_sum gives it (f32; f64 for f64 dY). CPU: bsmm_dw's
/// kernel twice. CUDA: the gate-run kernel over both layouts where bsmm_dw_pair_fused, else
/// bsmm_dw's kernels twice; deterministic either way. Not differentiable (a backward's op).
struct BsmmDwPair : OpBase {
  static constexpr const char* kName = "bsmm_dw_pair";
  static constexpr bool kDifferentiable = false;
  struct Attrs {
    LayoutPtr layout_a, layout_b;
    int64_t shift = 0;
    bool f32_output = false;
    bool column_sums = false;
  };
  static std::vector<TensorMeta> infer(const std::vector<TensorMeta>& in, const Attrs&);
  static void cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
  static void cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&);
};
}  // namespace op

}  // namespace tessera
